"""Retention (issue 12, PROTOCOL.md §9 K2-K4): release times, pruned keys, a retention floor.

Revision ID: r0004
Revises: r0003
Create Date: 2026-12-01

- ``runner_operations.released_at``: when the store recorded the row's release
  (unix seconds, this machine's clock), set by a trigger the moment ``released``
  turns true, so no code path can forget it. Rows released before this
  revision get the migration's time: later than their real release, so their
  horizon and stamp bound (K4) only grow, never shrink.
- ``runner_pruned_operations``: the bare key of every pruned row, with the
  stamp bound no Dispatch for it can exceed (K3, K4).
- ``runner_store_meta.retention_floor``: the highest stamp bound of a key
  dropped for good; every later owner starts its admission floor there (K4).
- Triggers (whoever writes, the database refuses what would license a replay):
  a row is deleted only once settled and released (or a tombstone) and only
  with its key kept (replaces r0002's "never deleted"); no row is inserted for
  a pruned id (a Dispatch or Cancel for it is refused OPERATION_PRUNED); a key
  is dropped only below the retention floor; the retention floor never goes down.
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "r0004"
down_revision = "r0003"
branch_labels = None
depends_on = None

# Frozen copies of the runner's settled states and of the trigger messages the
# store recognises (runner_svc/storage/retention.py: PRUNED_MARK).
_RELEASABLE = "'SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT'"
_NOW = "((julianday('now') - 2440587.5) * 86400.0)"

_TRIGGERS = (
    "CREATE TRIGGER runner_operations_deleted_only_when_pruned BEFORE DELETE ON "
    "runner_operations WHEN NOT EXISTS (SELECT 1 FROM runner_pruned_operations k "
    "WHERE k.operation_id = OLD.operation_id) OR NOT (OLD.state = 'TOMBSTONED' OR "
    f"(OLD.released AND OLD.state IN ({_RELEASABLE}))) BEGIN SELECT RAISE(ABORT, "
    "'a runner row is deleted only once settled and released, or a tombstone, with its "
    "key kept (R9, PROTOCOL.md 9 K2)'); END",
    "CREATE TRIGGER runner_operations_not_after_prune BEFORE INSERT ON runner_operations "
    "WHEN EXISTS (SELECT 1 FROM runner_pruned_operations k "
    "WHERE k.operation_id = NEW.operation_id) BEGIN SELECT RAISE(ABORT, "
    "'turnwire: operation pruned (PROTOCOL.md 9 K3)'); END",
    "CREATE TRIGGER runner_operations_release_time AFTER UPDATE OF released ON "
    "runner_operations WHEN NEW.released AND NOT OLD.released BEGIN UPDATE "
    f"runner_operations SET released_at = {_NOW} "
    "WHERE operation_id = NEW.operation_id; END",
    "CREATE TRIGGER runner_pruned_keys_dropped_below_floor BEFORE DELETE ON "
    "runner_pruned_operations WHEN OLD.stamp_bound > (SELECT retention_floor FROM "
    "runner_store_meta WHERE id = 1) BEGIN SELECT RAISE(ABORT, 'a pruned key is dropped "
    "only below the retention floor (PROTOCOL.md 9 K4)'); END",
    "CREATE TRIGGER runner_store_retention_floor_never_down BEFORE UPDATE OF retention_floor "
    "ON runner_store_meta WHEN NEW.retention_floor < OLD.retention_floor "
    "BEGIN SELECT RAISE(ABORT, 'the retention floor never goes down (PROTOCOL.md 9 K4)'); END",
)
_NEW_TRIGGERS = (
    "runner_store_retention_floor_never_down",
    "runner_pruned_keys_dropped_below_floor",
    "runner_operations_release_time",
    "runner_operations_not_after_prune",
    "runner_operations_deleted_only_when_pruned",
)
_NEVER_DELETED = (
    "CREATE TRIGGER runner_operations_never_deleted BEFORE DELETE ON runner_operations "
    "BEGIN SELECT RAISE(ABORT, 'runner rows are never deleted (R9, §6)'); END"
)


def upgrade() -> None:
    # Plain ALTERs, never batch mode: a table SQLite recreated would lose r0002's triggers.
    op.add_column("runner_operations", sa.Column("released_at", sa.Float(), nullable=True))
    op.create_index("ix_runner_operations_released_at", "runner_operations", ["released_at"])
    op.add_column(
        "runner_store_meta",
        sa.Column("retention_floor", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.create_table(
        "runner_pruned_operations",
        sa.Column("operation_id", sa.String(length=255), nullable=False),
        sa.Column("stamp_bound", sa.BigInteger(), nullable=False),
        sa.Column("pruned_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("operation_id"),
    )
    op.create_index(
        "ix_runner_pruned_operations_pruned_at", "runner_pruned_operations", ["pruned_at"]
    )
    op.get_bind().execute(
        sa.text("UPDATE runner_operations SET released_at = :now WHERE released"),
        {"now": time.time()},
    )
    op.execute("DROP TRIGGER runner_operations_never_deleted")
    for statement in _TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    for name in _NEW_TRIGGERS:
        op.execute(f"DROP TRIGGER {name}")
    op.execute(_NEVER_DELETED)
    op.drop_index("ix_runner_pruned_operations_pruned_at", table_name="runner_pruned_operations")
    op.drop_table("runner_pruned_operations")
    op.execute("ALTER TABLE runner_store_meta DROP COLUMN retention_floor")
    op.drop_index("ix_runner_operations_released_at", table_name="runner_operations")
    op.execute("ALTER TABLE runner_operations DROP COLUMN released_at")
