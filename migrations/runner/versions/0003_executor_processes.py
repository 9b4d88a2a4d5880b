"""Executor process groups recorded at launch (R10: executors never outlive their runner).

Revision ID: r0003
Revises: r0002
Create Date: 2026-12-01

- ``runner_executor_processes``: one row per executor process group launched
  (group id, leader start time, boot id); the next incarnation ends the groups
  an earlier one left running before it serves, and writes ``ended_at``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r0003"
down_revision = "r0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runner_executor_processes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("operation_id", sa.String(length=255), nullable=False),
        sa.Column("incarnation_id", sa.String(length=32), nullable=False),
        sa.Column("pgid", sa.Integer(), nullable=False),
        sa.Column("start_time", sa.BigInteger(), nullable=False),
        sa.Column("boot_id", sa.String(length=64), nullable=False),
        sa.Column("launched_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("ended_how", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("runner_executor_processes") as batch_op:
        batch_op.create_index("ix_runner_executor_processes_ended_at", ["ended_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runner_executor_processes") as batch_op:
        batch_op.drop_index("ix_runner_executor_processes_ended_at")
    op.drop_table("runner_executor_processes")
