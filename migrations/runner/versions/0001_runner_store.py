"""The runner store: ownership/meta row and one row per operation.

Revision ID: r0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runner_store_meta",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("store_id", sa.String(length=64), nullable=False),
        sa.Column("file_identity", sa.String(length=64), nullable=False),
        sa.Column("owner_incarnation_id", sa.String(length=32), nullable=False),
        sa.Column("owner_since", sa.Float(), nullable=False),
        sa.Column("last_sequence", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name="ck_runner_store_meta_single_row"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "runner_operations",
        sa.Column("operation_id", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("execution", sa.String(length=16), nullable=False),
        sa.Column("incarnation_id", sa.String(length=32), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=True),
        sa.Column("envelope_digest", sa.String(length=64), nullable=False),
        sa.Column("stop_reason", sa.String(length=16), nullable=True),
        sa.Column("result_output", sa.LargeBinary(), nullable=True),
        sa.Column("result_content_type", sa.String(length=255), nullable=True),
        sa.Column("result_metadata", sa.Text(), nullable=True),
        sa.Column("error_reason", sa.String(length=64), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("released", sa.Boolean(), nullable=False),
        sa.Column("accepted_at", sa.Float(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("settled_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("operation_id"),
    )
    with op.batch_alter_table("runner_operations") as batch_op:
        batch_op.create_index("ix_runner_operations_sequence", ["sequence"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("runner_operations") as batch_op:
        batch_op.drop_index("ix_runner_operations_sequence")
    op.drop_table("runner_operations")
    op.drop_table("runner_store_meta")
