"""Retention (issue 12, PROTOCOL.md §9 K1): an index to find what may go, and a guard.

Revision ID: 0003_retention
Revises: 0002_database_guards
Create Date: 2026-12-01

- ``ix_operations_finished_at``: the pruner reads terminal operations oldest
  first by ``finished_at`` (NULL while live, so live rows are outside the range).
- A trigger refuses deleting an operation that is not terminal and released,
  whoever deletes (a bug, a hand-run statement): only what K1 allows can go.
  Its events and attempts reference it, so they cannot outlive it either.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003_retention"
down_revision: str | None = "0002_database_guards"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TERMINAL = "'SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT', 'PROTOCOL_ERROR', 'REJECTED'"
_WHY = "only a terminal, released operation may be deleted (PROTOCOL.md 9 K1)"

_SQLITE_UP = (
    "CREATE TRIGGER operations_deleted_only_when_retired BEFORE DELETE ON operations "
    f"WHEN OLD.state NOT IN ({_TERMINAL}) OR NOT OLD.released "
    f"BEGIN SELECT RAISE(ABORT, '{_WHY}'); END",
)
_SQLITE_DOWN = ("DROP TRIGGER operations_deleted_only_when_retired",)

_POSTGRES_UP = (
    "CREATE FUNCTION operations_deleted_only_when_retired() RETURNS trigger "
    "LANGUAGE plpgsql AS $$ "
    f"BEGIN IF OLD.state NOT IN ({_TERMINAL}) OR NOT OLD.released THEN "
    f"RAISE EXCEPTION '{_WHY}'; END IF; RETURN OLD; END $$",
    "CREATE TRIGGER operations_deleted_only_when_retired BEFORE DELETE ON operations "
    "FOR EACH ROW EXECUTE FUNCTION operations_deleted_only_when_retired()",
)
_POSTGRES_DOWN = (
    "DROP TRIGGER operations_deleted_only_when_retired ON operations",
    "DROP FUNCTION operations_deleted_only_when_retired()",
)


def _statements(sqlite: tuple[str, ...], postgres: tuple[str, ...]) -> tuple[str, ...]:
    dialect = op.get_context().dialect.name
    if dialect == "sqlite":
        return sqlite
    if dialect == "postgresql":
        return postgres
    raise NotImplementedError(f"no retention guard for {dialect}")


def upgrade() -> None:
    # Not in batch mode: a table SQLite recreated would lose 0002's triggers.
    op.create_index("ix_operations_finished_at", "operations", ["finished_at"], unique=False)
    for statement in _statements(_SQLITE_UP, _POSTGRES_UP):
        op.execute(statement)


def downgrade() -> None:
    for statement in _statements(_SQLITE_DOWN, _POSTGRES_DOWN):
        op.execute(statement)
    op.drop_index("ix_operations_finished_at", table_name="operations")
