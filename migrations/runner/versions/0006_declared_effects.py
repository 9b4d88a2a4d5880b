"""What an execution declared and streamed, on its settled row (PROTOCOL.md R7, R13).

Revision ID: r0006
Revises: r0005
Create Date: 2026-12-03

- ``error_effect``: what the executor declared about effects downstream when
  it failed (``NONE``, ``APPLIED``; NULL: nothing declared, unknown), the fact
  a retry policy needs to know whether a retry could bill twice.
- ``error_retry_after``: with ``NONE``, the executor's hint in seconds for the
  earliest useful retry (a provider's Retry-After); NULL without one.
- ``output_chunks``: how many output chunks the execution emitted (the final
  offset of its stream). The chunks themselves are never stored.

Rows written before this revision read as nothing declared and no chunks,
which is what they were.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0006"
down_revision = "r0005"
branch_labels = None
depends_on = None


# Plain ALTER TABLE, never batch mode: a batch "move and copy" would rebuild
# runner_operations and silently drop its triggers (r0004, r0005).
def upgrade() -> None:
    op.add_column("runner_operations", sa.Column("error_effect", sa.String(16), nullable=True))
    op.add_column("runner_operations", sa.Column("error_retry_after", sa.Float(), nullable=True))
    op.add_column(
        "runner_operations",
        sa.Column("output_chunks", sa.BigInteger(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    # SQLite 3.35+ drops a column in place (no index or trigger names these).
    op.drop_column("runner_operations", "output_chunks")
    op.drop_column("runner_operations", "error_retry_after")
    op.drop_column("runner_operations", "error_effect")
