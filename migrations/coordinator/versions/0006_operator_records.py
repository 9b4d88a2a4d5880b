"""The operator's records (issue 13, PROTOCOL.md §10): verdicts, requeue links, drains.

Revision ID: 0006_operator_records
Revises: 0005_change_notifications
Create Date: 2026-12-02

- ``operator_verdicts``: an operator's answer to "did it run?" for a terminal
  operation whose execution is UNKNOWN (V2). Append-only: triggers refuse
  UPDATE and DELETE on both dialects, whoever writes, so the audit trail
  cannot be edited in place (V1: nothing rewrites what was recorded).
- ``operation_requeues``: which operation an operator made from which (V6);
  the primary key and the unique ``requeued_as`` make a requeue happen once.
- ``runner_drains``: one row per drained runner (V8), read by every replica.

No foreign keys to ``operations``: these are the audit trail, kept when §9
prunes the operation they speak of.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_operator_records"
down_revision: str | None = "0005_change_notifications"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WHY = "operator verdicts are append-only (PROTOCOL.md 10 V2)"

_SQLITE_UP = (
    "CREATE TRIGGER operator_verdicts_no_update BEFORE UPDATE ON operator_verdicts "
    f"BEGIN SELECT RAISE(ABORT, '{_WHY}'); END",
    "CREATE TRIGGER operator_verdicts_no_delete BEFORE DELETE ON operator_verdicts "
    f"BEGIN SELECT RAISE(ABORT, '{_WHY}'); END",
)
_POSTGRES_UP = (
    "CREATE FUNCTION operator_verdicts_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
    f"BEGIN RAISE EXCEPTION '{_WHY}'; END $$",
    "CREATE TRIGGER operator_verdicts_append_only BEFORE UPDATE OR DELETE ON operator_verdicts "
    "FOR EACH ROW EXECUTE FUNCTION operator_verdicts_append_only()",
)


def _time() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "operator_verdicts",
        sa.Column("operation_id", sa.String(128), nullable=False),
        sa.Column("sequence", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("verdict", sa.String(32), nullable=False),
        sa.Column("recorded_by", sa.String(255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("recorded_at", _time(), nullable=False),
        sa.CheckConstraint(
            "verdict IN ('EXECUTED', 'NOT_EXECUTED')", name="ck_operator_verdicts_verdict"
        ),
        sa.PrimaryKeyConstraint("operation_id", "sequence", name="pk_operator_verdicts"),
    )
    op.create_table(
        "operation_requeues",
        sa.Column("operation_id", sa.String(128), nullable=False),
        sa.Column("requeued_as", sa.String(128), nullable=False),
        sa.Column("requeued_by", sa.String(255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("requeued_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("operation_id", name="pk_operation_requeues"),
        sa.UniqueConstraint("requeued_as", name="uq_operation_requeues_requeued_as"),
    )
    op.create_table(
        "runner_drains",
        sa.Column("runner", sa.String(255), nullable=False),
        sa.Column("drained_by", sa.String(255), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("drained_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("runner", name="pk_runner_drains"),
    )
    dialect = op.get_context().dialect.name
    if dialect not in ("sqlite", "postgresql"):
        raise NotImplementedError(f"no append-only guard for {dialect}")
    for statement in _SQLITE_UP if dialect == "sqlite" else _POSTGRES_UP:
        op.execute(statement)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP TRIGGER operator_verdicts_append_only ON operator_verdicts")
        op.execute("DROP FUNCTION operator_verdicts_append_only()")
    op.drop_table("runner_drains")
    op.drop_table("operation_requeues")
    op.drop_table("operator_verdicts")
