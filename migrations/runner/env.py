"""Alembic environment for the runner store (its own version table, batch mode for SQLite).

Run through ``runner_svc.storage.migrate`` (or ``python -m runner_svc migrate``),
which passes an open connection in ``config.attributes["connection"]``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from runner_svc.storage.migrate import VERSION_TABLE
from runner_svc.storage.tables import metadata

config = context.config


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        # SQLite cannot ALTER most things in place; batch mode copies the table.
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as owned:
        _run(owned)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("the runner store migrates online only")
run_migrations_online()
