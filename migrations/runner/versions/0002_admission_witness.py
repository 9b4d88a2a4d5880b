"""The §6 witness: admission floor, chain of openings, row digest, guards.

Revision ID: r0002
Revises: r0001
Create Date: 2026-12-01

- ``runner_store_meta.admission_floor``: the owner's admission floor
  (microseconds); ``row_count``/``row_digest``: a digest of the set of rows,
  so a row removed or added outside the runner is noticed at open.
- ``runner_operations.dispatch_stamp``: the stamp that admitted the row.
- ``runner_store_openings``: one row per opening of the store (append-only).
- Triggers: rows are never deleted, openings never change, and the floor never
  goes down except when the owner changes. Whoever writes (a bug, a hand-run
  statement), the database refuses what would void the witness.
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "r0002"
down_revision = "r0001"
branch_labels = None
depends_on = None

_TRIGGERS = (
    "CREATE TRIGGER runner_operations_never_deleted BEFORE DELETE ON runner_operations "
    "BEGIN SELECT RAISE(ABORT, 'runner rows are never deleted (R9, §6)'); END",
    "CREATE TRIGGER runner_store_openings_append_only BEFORE UPDATE ON runner_store_openings "
    "BEGIN SELECT RAISE(ABORT, 'store openings are append-only (§6)'); END",
    "CREATE TRIGGER runner_store_openings_never_deleted BEFORE DELETE ON runner_store_openings "
    "BEGIN SELECT RAISE(ABORT, 'store openings are append-only (§6)'); END",
    "CREATE TRIGGER runner_store_floor_never_down BEFORE UPDATE OF admission_floor "
    "ON runner_store_meta WHEN NEW.admission_floor < OLD.admission_floor "
    "AND NEW.owner_incarnation_id = OLD.owner_incarnation_id "
    "BEGIN SELECT RAISE(ABORT, 'the admission floor never goes down (§6)'); END",
)


def _digest(operation_ids: list[str]) -> int:
    # Frozen copy of runner_svc.core.witness.row_digest_term summed mod 2^63.
    total = 0
    for operation_id in operation_ids:
        term = int.from_bytes(hashlib.sha256(operation_id.encode()).digest()[:8], "big")
        total = (total + term % 2**63) % 2**63
    return total


def upgrade() -> None:
    with op.batch_alter_table("runner_store_meta") as batch_op:
        batch_op.add_column(
            sa.Column("admission_floor", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("row_count", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("row_digest", sa.BigInteger(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("runner_operations") as batch_op:
        batch_op.add_column(
            sa.Column("dispatch_stamp", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch_op.create_index("ix_runner_operations_state", ["state"], unique=False)
    op.create_table(
        "runner_store_openings",
        sa.Column("position", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("incarnation_id", sa.String(length=32), nullable=False),
        sa.Column("predecessor_incarnation_id", sa.String(length=32), nullable=False),
        sa.Column("predecessor_floor", sa.BigInteger(), nullable=False),
        sa.Column("opened_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("position"),
        sa.UniqueConstraint("incarnation_id", name="uq_runner_store_openings_incarnation"),
    )
    bind = op.get_bind()
    ids = [row[0] for row in bind.execute(sa.text("SELECT operation_id FROM runner_operations"))]
    bind.execute(
        sa.text("UPDATE runner_store_meta SET row_count = :count, row_digest = :digest"),
        {"count": len(ids), "digest": _digest(ids)},
    )
    for statement in _TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    for name in (
        "runner_store_floor_never_down",
        "runner_store_openings_never_deleted",
        "runner_store_openings_append_only",
        "runner_operations_never_deleted",
    ):
        op.execute(f"DROP TRIGGER {name}")
    op.drop_table("runner_store_openings")
    with op.batch_alter_table("runner_operations") as batch_op:
        batch_op.drop_index("ix_runner_operations_state")
        batch_op.drop_column("dispatch_stamp")
    with op.batch_alter_table("runner_store_meta") as batch_op:
        batch_op.drop_column("row_digest")
        batch_op.drop_column("row_count")
        batch_op.drop_column("admission_floor")
