"""Running the runner store's own Alembic environment (migrations/runner/).

In the source tree it is ``migrations/runner``; installed, it is the package
``runner_svc.migrations``, found through importlib.resources.

The runner keeps its revision in its own version table so a coordinator
journal and a runner store could even share a file without clashing.
"""

from __future__ import annotations

import functools
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from turnwire.distribution import alembic_environment

VERSION_TABLE = "runner_alembic_version"
MIGRATIONS_PACKAGE = "runner_svc.migrations"


class StoreSchemaError(RuntimeError):
    """The store's schema revision is one this code does not know (written by newer code?)."""


@functools.cache
def script_location() -> Path:
    """The installed Alembic environment (MissingPackageData if the install lacks it)."""
    return alembic_environment(MIGRATIONS_PACKAGE)


def alembic_config(connection: sa.Connection | None = None, url: str = "") -> Config:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    if url:
        config.set_main_option("sqlalchemy.url", url)
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def script_directory() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    head = script_directory().get_current_head()
    if head is None:  # pragma: no cover - the repository always has a revision
        raise StoreSchemaError("migrations/runner has no revisions")
    return head


def current_revision(connection: sa.Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def check_known(revision: str | None, store: str) -> None:
    """Refuse a store whose revision this code has never heard of."""
    if revision is None:
        return
    known = {script.revision for script in script_directory().walk_revisions()}
    if revision not in known:
        raise StoreSchemaError(
            f"runner store {store} has schema revision {revision!r}, unknown to this runner "
            f"(newest known: {head_revision()!r}); it was probably written by a newer version. "
            "Refusing to start rather than guess."
        )


def upgrade_to_head(connection: sa.Connection) -> None:
    command.upgrade(alembic_config(connection), "head")


def downgrade_to(connection: sa.Connection, revision: str) -> None:
    command.downgrade(alembic_config(connection), revision)
