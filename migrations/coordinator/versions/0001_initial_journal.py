"""The initial journal: operations, attempts, events.

Revision ID: 0001_initial_journal
Revises:
Create Date: 2026-11-29

Written by hand, self-contained: a migration must not import application
code that later changes (types here are plain SQLAlchemy types).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_initial_journal"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.String(128)
_NAME = sa.String(255)
_DIGEST = sa.String(64)
_ENUM = sa.String(32)
_AT = sa.DateTime(timezone=True)

_STATES = (
    "'QUEUED', 'DISPATCHING', 'DISPATCH_UNKNOWN', 'RUNNING', 'CANCELLING', 'SUCCEEDED', "
    "'FAILED', 'CANCELLED', 'TIMED_OUT', 'PROTOCOL_ERROR', 'REJECTED'"
)
_EXECUTIONS = "'NOT_STARTED', 'STARTED', 'UNKNOWN'"


def upgrade() -> None:
    op.create_table(
        "operations",
        sa.Column("operation_id", _ID, nullable=False),
        sa.Column("principal", _NAME, nullable=False),
        sa.Column("idempotency_key_digest", _DIGEST, nullable=False),
        sa.Column("request_digest", _DIGEST, nullable=False),
        sa.Column("envelope", sa.LargeBinary(), nullable=False),
        sa.Column("envelope_digest", _DIGEST, nullable=False),
        sa.Column("pool", _NAME, nullable=False),
        sa.Column("kind", _ENUM, nullable=False),
        sa.Column("replay_policy", _ENUM, nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("state", _ENUM, nullable=False),
        sa.Column("execution", _ENUM, nullable=False),
        sa.Column("created_at", _AT, nullable=False),
        sa.Column("updated_at", _AT, nullable=False),
        sa.Column("attempt_count", sa.Integer(), nullable=False),
        sa.Column("last_attempt_at", _AT, nullable=True),
        sa.Column("runner", _NAME, nullable=True),
        sa.Column("incarnation_id", _NAME, nullable=True),
        sa.Column("store_id", _NAME, nullable=True),
        sa.Column("acknowledged", sa.Boolean(), nullable=False),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("lease_owner", _NAME, nullable=True),
        sa.Column("lease_expires_at", _AT, nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("stop_reason", _ENUM, nullable=True),
        sa.Column("result", sa.LargeBinary(), nullable=True),
        sa.Column("error_reason", _NAME, nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("next_action_at", _AT, nullable=True),
        sa.Column("unknown_since", _AT, nullable=True),
        sa.Column("released", sa.Boolean(), nullable=False),
        sa.Column("finished_at", _AT, nullable=True),
        sa.Column("last_event_sequence", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("operation_id", name="pk_operations"),
        sa.UniqueConstraint(
            "principal",
            "idempotency_key_digest",
            name="uq_operations_principal_idempotency_key_digest",
        ),
        sa.CheckConstraint(f"state IN ({_STATES})", name="ck_operations_state"),
        sa.CheckConstraint(f"execution IN ({_EXECUTIONS})", name="ck_operations_execution"),
        sa.CheckConstraint("attempt_count >= 0", name="ck_operations_attempt_count"),
        sa.CheckConstraint("version >= 1", name="ck_operations_version"),
    )
    op.create_index(
        "ix_operations_principal_created_at_operation_id",
        "operations",
        ["principal", "created_at", "operation_id"],
    )
    op.create_index("ix_operations_state_next_action_at", "operations", ["state", "next_action_at"])
    op.create_table(
        "attempts",
        sa.Column("operation_id", _ID, nullable=False),
        sa.Column("number", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("runner", _NAME, nullable=False),
        sa.Column("incarnation_id", _NAME, nullable=False),
        sa.Column("store_id", _NAME, nullable=True),
        sa.Column("sent_at", _AT, nullable=False),
        sa.Column("outcome", _ENUM, nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["operation_id"],
            ["operations.operation_id"],
            name="fk_attempts_operation_id_operations",
        ),
        sa.PrimaryKeyConstraint("operation_id", "number", name="pk_attempts"),
    )
    op.create_table(
        "events",
        sa.Column("operation_id", _ID, nullable=False),
        sa.Column("sequence", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("from_state", _ENUM, nullable=True),
        sa.Column("to_state", _ENUM, nullable=False),
        sa.Column("execution", _ENUM, nullable=False),
        sa.Column("at", _AT, nullable=False),
        sa.Column("reason", _NAME, nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["operation_id"],
            ["operations.operation_id"],
            name="fk_events_operation_id_operations",
        ),
        sa.PrimaryKeyConstraint("operation_id", "sequence", name="pk_events"),
    )


def downgrade() -> None:
    op.drop_table("events")
    op.drop_table("attempts")
    op.drop_index("ix_operations_state_next_action_at", table_name="operations")
    op.drop_index("ix_operations_principal_created_at_operation_id", table_name="operations")
    op.drop_table("operations")
