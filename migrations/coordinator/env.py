"""Alembic environment for the coordinator journal (see README.md here).

Configured in code by ``coordinator_svc.storage.schema.alembic_config``: the
journal URL arrives in ``config.attributes["journal_url"]``. The engine is
the journal's own (same SQLite pragmas, BEGIN IMMEDIATE), so on SQLite the
whole upgrade runs in one transaction, like on PostgreSQL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from coordinator_svc.storage.backends import backend_for
from coordinator_svc.storage.schema import VERSION_TABLE, journal_url
from coordinator_svc.storage.tables import metadata

config = context.config


def _url() -> sa.URL:
    configured = config.attributes.get("journal_url") or config.get_main_option("sqlalchemy.url")
    if not configured:
        raise RuntimeError("no journal URL: use coordinator_svc.storage.schema.alembic_config(url)")
    return journal_url(configured)


def _options() -> dict[str, object]:
    return {
        "target_metadata": metadata,
        "version_table": VERSION_TABLE,
        # SQLite cannot ALTER most things; batch mode recreates the table.
        "render_as_batch": True,
        "compare_type": True,
        # Our SQLite engine issues BEGIN before DDL too, so DDL is
        # transactional there as well: a failed upgrade leaves nothing behind.
        "transactional_ddl": True,
    }


def run_migrations_offline() -> None:
    context.configure(url=_url(), literal_binds=True, **_options())
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = _url()
    engine = backend_for(url).make_engine(url, busy_timeout=30.0)
    try:
        with engine.connect() as connection:
            context.configure(connection=connection, **_options())
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
