"""Retention of rows nobody will release (PROTOCOL.md §9 K6), and of executor records.

Revision ID: r0005
Revises: r0004
Create Date: 2026-12-02

- The delete trigger of r0004 is replaced: a row may also go, unreleased,
  when its key is kept for ever (``stamp_bound`` = 2^63 - 1, which no floor
  reaches, so r0004's key trigger never lets that key go): a settled row the
  coordinator never released, or a row an earlier incarnation left unsettled.
- ``ix_runner_operations_unreleased``: a partial index over the unreleased
  rows, so the pass that looks for them reads only those (few: a Release
  follows a settlement within seconds) and never the whole table.
"""

from __future__ import annotations

from alembic import op

revision = "r0005"
down_revision = "r0004"
branch_labels = None
depends_on = None

# Frozen copies (runner_svc/core/retention.py: KEPT_FOR_EVER; r0004's trigger).
_KEPT_FOR_EVER = "9223372036854775807"
_RELEASABLE = "'SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT'"
_DELETE_TRIGGER = "runner_operations_deleted_only_when_pruned"
_R0004_DELETE = (
    f"CREATE TRIGGER {_DELETE_TRIGGER} BEFORE DELETE ON "
    "runner_operations WHEN NOT EXISTS (SELECT 1 FROM runner_pruned_operations k "
    "WHERE k.operation_id = OLD.operation_id) OR NOT (OLD.state = 'TOMBSTONED' OR "
    f"(OLD.released AND OLD.state IN ({_RELEASABLE}))) BEGIN SELECT RAISE(ABORT, "
    "'a runner row is deleted only once settled and released, or a tombstone, with its "
    "key kept (R9, PROTOCOL.md 9 K2)'); END"
)
_R0005_DELETE = (
    f"CREATE TRIGGER {_DELETE_TRIGGER} BEFORE DELETE ON "
    "runner_operations WHEN NOT EXISTS (SELECT 1 FROM runner_pruned_operations k "
    "WHERE k.operation_id = OLD.operation_id) OR NOT (OLD.state = 'TOMBSTONED' OR "
    f"(OLD.released AND OLD.state IN ({_RELEASABLE})) OR EXISTS (SELECT 1 FROM "
    "runner_pruned_operations k WHERE k.operation_id = OLD.operation_id AND "
    f"k.stamp_bound = {_KEPT_FOR_EVER})) BEGIN SELECT RAISE(ABORT, "
    "'a runner row is deleted only with its key kept: once settled and released, or a "
    "tombstone (PROTOCOL.md 9 K2), or with its key kept for ever (9 K6)'); END"
)
_UNRELEASED_INDEX = (
    "CREATE INDEX ix_runner_operations_unreleased ON runner_operations (state) WHERE NOT released"
)


def upgrade() -> None:
    op.execute(f"DROP TRIGGER {_DELETE_TRIGGER}")
    op.execute(_R0005_DELETE)
    op.execute(_UNRELEASED_INDEX)


def downgrade() -> None:
    op.execute("DROP INDEX ix_runner_operations_unreleased")
    op.execute(f"DROP TRIGGER {_DELETE_TRIGGER}")
    op.execute(_R0004_DELETE)
