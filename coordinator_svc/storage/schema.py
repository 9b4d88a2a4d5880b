"""Schema revisions: run the Alembic migrations, and check a journal's revision.

The Alembic environment lives in ``migrations/coordinator`` in the source
tree (see its README) and is installed as the package
``coordinator_svc.migrations``, found through importlib.resources; it is
configured here in code, so no ``alembic.ini`` is needed.
The version table is ``coordinator_alembic_version`` so the runner's
migrations can share a database without colliding.

``migrate(url)`` is the only thing that changes a schema; opening a journal
never does (``sql.open_journal`` refuses a schema it does not expect).
"""

from __future__ import annotations

import functools
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError

from coordinator_svc.ports import JournalNotMigrated, JournalUnavailable, SchemaTooNew
from coordinator_svc.storage.backends import READ_ONLY, Backend, SqliteBackend, backend_for
from turnwire.distribution import alembic_environment

MIGRATIONS_PACKAGE = "coordinator_svc.migrations"
VERSION_TABLE = "coordinator_alembic_version"
MIGRATE_COMMAND = "python -m coordinator_svc migrate"


@functools.cache
def migrations_dir() -> Path:
    """The installed Alembic environment (MissingPackageData if the install lacks it)."""
    return alembic_environment(MIGRATIONS_PACKAGE)


def journal_url(url: str | sa.URL) -> sa.URL:
    """Parse a journal URL; plain ``postgresql://`` means the psycopg 3 driver."""
    parsed = sa.make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    backend_for(parsed)  # refuse unknown databases early, with a clear message
    return parsed


def alembic_config(url: str | sa.URL) -> Config:
    """An Alembic Config for the coordinator journal at ``url``.

    The URL travels in ``config.attributes`` rather than the ini options,
    where ``%`` in a password would be read as interpolation.
    """
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # A revision's file is named by its id alone ("0003_what_it_does.py").
    config.set_main_option("file_template", "%%(rev)s")
    config.attributes["journal_url"] = journal_url(url)
    return config


def head_revision() -> str:
    """The newest revision this code knows (there must be exactly one head)."""
    heads = ScriptDirectory(str(migrations_dir())).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"coordinator migrations must have one head, found {heads}")
    return heads[0]


def migrate(url: str | sa.URL, revision: str = "head") -> None:
    """Upgrade the journal at ``url`` to ``revision`` (creating it if empty).

    For SQLite the file's directory is created if missing. Refuses a journal
    written by newer code (SchemaTooNew) rather than guessing; a database
    error raises JournalUnavailable, and the upgrade's transaction leaves
    the schema as it was.
    """
    parsed = journal_url(url)
    migrations_dir()  # an incomplete install fails here, before the database is touched
    backend = backend_for(parsed)
    if isinstance(backend, SqliteBackend):
        path = SqliteBackend.database_file(parsed)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    engine = backend.make_engine(parsed, busy_timeout=30.0)
    try:
        with engine.connect() as connection:
            _refuse_unknown(current_revisions(connection))
        command.upgrade(alembic_config(parsed), revision)
    except sa.exc.SQLAlchemyError as error:
        raise JournalUnavailable(f"cannot migrate the journal: {error}") from error
    finally:
        engine.dispose()


def current_revisions(connection: sa.Connection) -> tuple[str, ...]:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return tuple(context.get_current_heads())


def _refuse_unknown(current: tuple[str, ...]) -> None:
    known = ScriptDirectory(str(migrations_dir()))
    for revision in current:
        if not _knows(known, revision):
            raise SchemaTooNew(
                f"the journal is at schema revision {revision}, which this code does not "
                f"know (its newest is {head_revision()}): it was migrated by newer code; "
                "run that version, or restore a backup made before the upgrade"
            )


def check_revision(connection: sa.Connection) -> None:
    """Refuse a journal this code cannot safely use.

    Raises JournalNotMigrated (no schema, or an older one) or SchemaTooNew
    (a revision this code does not know: written by newer code).
    """
    current = current_revisions(connection)
    if not current:
        raise JournalNotMigrated(f"the journal has no schema; run `{MIGRATE_COMMAND}` first")
    _refuse_unknown(current)
    head = head_revision()
    if current != (head,):
        raise JournalNotMigrated(
            f"the journal is at schema revision {', '.join(current)}, this code needs "
            f"{head}; run `{MIGRATE_COMMAND}` first"
        )


def _knows(scripts: ScriptDirectory, revision: str) -> bool:
    try:
        return scripts.get_revision(revision) is not None
    except (RevisionError, CommandError):  # alembic wraps "no such revision" variously
        return False


def open_checked_engine(url: str | sa.URL, busy_timeout: float) -> tuple[sa.Engine, Backend]:
    """An engine on the journal at ``url`` and its backend, once the schema is the one this
    code expects (the journal and the pruner each open their own). Never changes the
    schema: no journal file or an older schema raises JournalNotMigrated, a newer one
    SchemaTooNew, an unreachable database JournalUnavailable; the engine is disposed of."""
    parsed = journal_url(url)
    backend = backend_for(parsed)
    if isinstance(backend, SqliteBackend):
        path = SqliteBackend.database_file(parsed)
        if path is not None and not path.exists():
            raise JournalNotMigrated(f"no journal file at {path}; run `{MIGRATE_COMMAND}` first")
    engine = backend.make_engine(parsed, busy_timeout)
    try:
        with engine.connect() as connection:
            connection.execution_options(**{READ_ONLY: True})
            with connection.begin():
                check_revision(connection)
    except sa.exc.SQLAlchemyError as error:
        engine.dispose()
        raise JournalUnavailable(f"cannot open the journal: {error}") from error
    except BaseException:
        engine.dispose()
        raise
    return engine, backend
