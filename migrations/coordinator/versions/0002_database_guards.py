"""Database-enforced invariants: events are append-only, a terminal state is final.

Revision ID: 0002_database_guards
Revises: 0001_initial_journal
Create Date: 2026-11-29

The journal code already refuses both (storage.rules); these triggers make
the database refuse them too, whoever writes (a bug, a second code path, a
hand-run UPDATE): C10/C13, PROTOCOL.md §8.6.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002_database_guards"
down_revision: str | None = "0001_initial_journal"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TERMINAL = "'SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT', 'PROTOCOL_ERROR', 'REJECTED'"

_SQLITE_UP = (
    "CREATE TRIGGER events_append_only BEFORE UPDATE ON events "
    "BEGIN SELECT RAISE(ABORT, 'events are append-only (C13)'); END",
    "CREATE TRIGGER operations_terminal_final BEFORE UPDATE OF state ON operations "
    f"WHEN OLD.state IN ({_TERMINAL}) AND NEW.state <> OLD.state "
    "BEGIN SELECT RAISE(ABORT, 'a terminal state is final (C10)'); END",
)
_SQLITE_DOWN = (
    "DROP TRIGGER operations_terminal_final",
    "DROP TRIGGER events_append_only",
)

_POSTGRES_UP = (
    "CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN RAISE EXCEPTION 'events are append-only (C13)'; END $$",
    "CREATE TRIGGER events_append_only BEFORE UPDATE ON events "
    "FOR EACH ROW EXECUTE FUNCTION events_append_only()",
    "CREATE FUNCTION operations_terminal_final() RETURNS trigger LANGUAGE plpgsql AS $$ "
    f"BEGIN IF OLD.state IN ({_TERMINAL}) AND NEW.state IS DISTINCT FROM OLD.state THEN "
    "RAISE EXCEPTION 'a terminal state is final (C10)'; END IF; RETURN NEW; END $$",
    "CREATE TRIGGER operations_terminal_final BEFORE UPDATE OF state ON operations "
    "FOR EACH ROW EXECUTE FUNCTION operations_terminal_final()",
)
_POSTGRES_DOWN = (
    "DROP TRIGGER operations_terminal_final ON operations",
    "DROP FUNCTION operations_terminal_final()",
    "DROP TRIGGER events_append_only ON events",
    "DROP FUNCTION events_append_only()",
)


def _statements(sqlite: tuple[str, ...], postgres: tuple[str, ...]) -> tuple[str, ...]:
    dialect = op.get_context().dialect.name
    if dialect == "sqlite":
        return sqlite
    if dialect == "postgresql":
        return postgres
    raise NotImplementedError(f"no guard triggers for {dialect}")


def upgrade() -> None:
    for statement in _statements(_SQLITE_UP, _POSTGRES_UP):
        op.execute(statement)


def downgrade() -> None:
    for statement in _statements(_SQLITE_DOWN, _POSTGRES_DOWN):
        op.execute(statement)
