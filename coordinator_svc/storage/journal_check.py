"""``serve --check-config``'s look at the journal: reachable, and at this code's schema.

It applies the rule ``open_journal`` applies (``schema.check_revision``), on a
read-only transaction, and changes nothing: no file is created, no schema
migrated, no lock taken. On PostgreSQL it also reports the server's
``max_connections`` and the connections in use, beside what one coordinator
replica opens (``connections_per_replica``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.exc import ArgumentError

from coordinator_svc.ports import JournalNotMigrated
from coordinator_svc.storage.backends import READ_ONLY, PostgresBackend, SqliteBackend, backend_for
from coordinator_svc.storage.schema import (
    check_revision,
    current_revisions,
    head_revision,
    journal_url,
)
from turnwire.config_check import ConfigProblem, writable_directory_for

MIGRATE = "turnwire-coordinator migrate"
CHECK_TIMEOUT_SECONDS = 5.0
URL_FORMS = (
    "sqlite:///PATH, or postgresql://USER[:PASSWORD]@HOST:PORT/DB[?sslmode=verify-full"
    "&sslrootcert=CA.pem] with the password percent-encoded (docs/DEPLOYMENT.md)"
)


def connections_per_replica() -> int:
    """PostgreSQL connections one coordinator holds open: one per journal worker thread
    (``PostgresBackend.worker_threads``, the pool's size, no overflow), the retention
    pruner's one (its passes run one batch at a time) and the change listener's one
    (LISTEN, §5). A /metrics scrape opens one more for as long as it runs."""
    return PostgresBackend.worker_threads + 1 + 1


def check_journal(url: str, *, will_migrate: bool) -> str:
    """What the journal at ``url`` is; ConfigProblem (with the fix) when serve would refuse it."""
    try:
        parsed = journal_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ConfigProblem(f"invalid journal URL: {exc}", f"give {URL_FORMS}") from None
    shown = parsed.render_as_string(hide_password=True)
    backend = backend_for(parsed)
    # Alembic's INFO lines ("Context impl ...") are noise in a report of findings.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    migrate_fix = (
        f"run `{MIGRATE} --journal-url URL` once (or start serve with --migrate, "
        "TURNWIRE_MIGRATE=1)"
    )
    if isinstance(backend, SqliteBackend):
        path = SqliteBackend.database_file(parsed)
        if path is None:
            return f"{shown}: in memory (nothing survives a restart)"
        place = writable_directory_for(path, "journal")
        if not path.exists():
            if will_migrate:
                return f"{place}; no file yet: --migrate creates it at {head_revision()}"
            raise ConfigProblem(f"no journal file at {path}", migrate_fix)
        _check_sqlite_file(path)
    engine = backend.make_engine(parsed, CHECK_TIMEOUT_SECONDS)
    try:
        with engine.connect() as connection:
            connection.execution_options(**{READ_ONLY: True})
            with connection.begin():
                current = current_revisions(connection)
                facts = _server_facts(connection) if isinstance(backend, PostgresBackend) else ""
                try:
                    check_revision(connection)
                except JournalNotMigrated as exc:
                    if not will_migrate:
                        raise ConfigProblem(f"{shown}: {exc}", migrate_fix) from None
                    at = ", ".join(current) or "no schema"
                    return f"{shown}: {at}; --migrate upgrades it to {head_revision()}{facts}"
    except sa.exc.SQLAlchemyError as exc:
        detail = " ".join(str(getattr(exc, "orig", None) or exc).split())
        raise ConfigProblem(
            f"cannot reach the journal {shown}: {detail}",
            "check the URL's host, port, user and database, the password (percent-encoded "
            "in the URL, or in PGPASSFILE / ~/.pgpass), sslmode and sslrootcert",
        ) from None
    finally:
        engine.dispose()
    return f"{shown}: schema at {head_revision()}, this code's head{facts}"


def _check_sqlite_file(path: Path) -> None:
    if not os.access(path, os.R_OK | os.W_OK):
        raise ConfigProblem(
            f"journal {path} cannot be read and written by this user (uid {os.getuid()})",
            f"give the service's user read and write access to {path} and its directory",
        )


def _server_facts(connection: sa.Connection) -> str:
    version = connection.exec_driver_sql("SHOW server_version").scalar_one()
    limit = int(connection.exec_driver_sql("SHOW max_connections").scalar_one())
    in_use = connection.exec_driver_sql(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
    ).scalar_one()
    return (
        f"; PostgreSQL {version}, max_connections {limit} ({in_use} in use); each "
        f"coordinator opens {connections_per_replica()} (+1 per /metrics scrape)"
    )
