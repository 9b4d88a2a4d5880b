"""Every execution of a turn's executor, journaled with the operation (PROTOCOL.md R15).

Revision ID: 0008_executions
Revises: 0007_runner_membership
Create Date: 2026-12-04

- ``operations.executions``: the execution records the bound runner reported
  (a serialized ``turnwire.common.v1.ExecutionLog``: number, start truth,
  outcome, reason, declared effect, retry hint, times, why it was retried),
  as learned from a Dispatch reply, a status answer, the watch stream or the
  settled row. Written with the terminal state once (C10) and, while the turn
  runs, on the writes the coordinator makes anyway and when a retry begins.
- ``operations.execution_count``: how many records that is, so the journal
  knows a retry began without decoding them.

Operations stored before this revision read as no records (count 0); the
public Operation then shows one execution if its execution is STARTED.
Plain ``ADD COLUMN`` on both dialects: no table rebuild, the guards of 0002
and 0005 stay as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_executions"
down_revision: str | None = "0007_runner_membership"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("operations", sa.Column("executions", sa.LargeBinary(), nullable=True))
    op.add_column(
        "operations",
        sa.Column("execution_count", sa.Integer(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_column("operations", "execution_count")
    op.drop_column("operations", "executions")
