"""Runner membership (PROTOCOL.md §11): which runners the coordinators use, as a log.

Revision ID: 0007_runner_membership
Revises: 0006_operator_records
Create Date: 2026-12-04

- ``runner_membership``: per runner name, numbered records (``sequence`` from
  1), each ``ADDED`` (the member's address, pool and kinds) or ``REMOVED``
  (the same fields, whether the removal was forced and how many turns were
  bound to the runner then). A name's latest record says whether it is a
  member; an ADDED record's sequence is that member's generation (M1). The
  primary key (runner, sequence) settles two writers racing on one name: one
  stores, the other meets the key. Append-only like ``operator_verdicts``:
  triggers refuse UPDATE and DELETE on both dialects, whoever writes.

Every coordinator reads it at start and every few seconds (M5); the
``--runner`` flags only add names it has never seen (M8).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_runner_membership"
down_revision: str | None = "0006_operator_records"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WHY = "runner membership records are append-only (PROTOCOL.md 11 M1)"

_SQLITE_UP = (
    "CREATE TRIGGER runner_membership_no_update BEFORE UPDATE ON runner_membership "
    f"BEGIN SELECT RAISE(ABORT, '{_WHY}'); END",
    "CREATE TRIGGER runner_membership_no_delete BEFORE DELETE ON runner_membership "
    f"BEGIN SELECT RAISE(ABORT, '{_WHY}'); END",
)
_POSTGRES_UP = (
    "CREATE FUNCTION runner_membership_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
    f"BEGIN RAISE EXCEPTION '{_WHY}'; END $$",
    "CREATE TRIGGER runner_membership_append_only BEFORE UPDATE OR DELETE ON runner_membership "
    "FOR EACH ROW EXECUTE FUNCTION runner_membership_append_only()",
)


def upgrade() -> None:
    op.create_table(
        "runner_membership",
        sa.Column("runner", sa.String(255), nullable=False),
        sa.Column("sequence", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("address", sa.String(255), nullable=False),
        sa.Column("pool", sa.String(255), nullable=False),
        sa.Column("kinds", sa.String(64), nullable=False),
        sa.Column("recorded_by", sa.String(255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("forced", sa.Boolean(), nullable=False),
        sa.Column("bound_turns", sa.Integer(), nullable=False),
        sa.CheckConstraint("action IN ('ADDED', 'REMOVED')", name="ck_runner_membership_action"),
        sa.CheckConstraint("sequence >= 1", name="ck_runner_membership_sequence"),
        sa.PrimaryKeyConstraint("runner", "sequence", name="pk_runner_membership"),
    )
    dialect = op.get_context().dialect.name
    if dialect not in ("sqlite", "postgresql"):
        raise NotImplementedError(f"no append-only guard for {dialect}")
    for statement in _SQLITE_UP if dialect == "sqlite" else _POSTGRES_UP:
        op.execute(statement)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP TRIGGER runner_membership_append_only ON runner_membership")
        op.execute("DROP FUNCTION runner_membership_append_only()")
    op.drop_table("runner_membership")
