"""Every execution of a row's executor, on the row (PROTOCOL.md R15).

Revision ID: r0007
Revises: r0006
Create Date: 2026-12-04

- ``executions``: JSON text, one record per execution of the executor for
  this operation (number, its own start truth, launch / start / end times,
  outcome, error reason, declared effect, retry hint, why it was retried;
  runner_svc/storage/executions_json.py). A retry adds a record to the one
  row the runner holds for the operation, in the same write as its launch
  intent, so the record is as durable as the row.

Rows written before this revision read as no records: the coordinator shows
them as they were (one execution or none, from the row's own fields).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0007"
down_revision = "r0006"
branch_labels = None
depends_on = None


# Plain ALTER TABLE, never batch mode: a batch "move and copy" would rebuild
# runner_operations and silently drop its triggers (r0004, r0005).
def upgrade() -> None:
    op.add_column("runner_operations", sa.Column("executions", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("runner_operations", "executions")
