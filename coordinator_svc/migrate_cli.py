"""``turnwire-coordinator migrate``: upgrade the journal and say from which revision to which."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def _current_revision(url: str) -> str | None:
    import sqlalchemy as sa
    from alembic.runtime.migration import MigrationContext

    from coordinator_svc.storage import schema
    from coordinator_svc.storage.backends import SqliteBackend

    parsed = schema.journal_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = SqliteBackend.database_file(parsed)
        if path is not None and not path.exists():
            return None  # do not create the file just to look at it
    engine = sa.create_engine(parsed)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"version_table": schema.VERSION_TABLE}
            )
            heads = context.get_current_heads()
    finally:
        engine.dispose()
    return ", ".join(heads) or None


def run_migrate(args: argparse.Namespace, fail: Callable[[int, str], int]) -> int:
    from coordinator_svc.storage import head_revision, migrate

    try:
        before = _current_revision(args.journal_url)
        migrate(args.journal_url)
        after = _current_revision(args.journal_url)
    except Exception as exc:  # alembic and drivers raise many kinds; all mean "not migrated"
        return fail(1, f"migration failed: {exc}")
    print(f"journal schema: {before or '(empty)'} -> {after} (head {head_revision()})", flush=True)
    return 0
