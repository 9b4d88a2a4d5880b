"""The runner store's tables (SQLAlchemy Core). Alembic migrations/runner/ owns the DDL.

One row per operation id, whatever incarnation wrote it (§6): the primary
key is the operation id, so the database itself refuses a second row.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

# Exactly one row (id = 1): who owns the store now, and its change counter.
store_meta = sa.Table(
    "runner_store_meta",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    # Stable identity; a copied or restored file gets a new one (§6).
    sa.Column("store_id", sa.String(64), nullable=False),
    # (st_dev, st_ino) of the file that minted store_id: a copy has another.
    sa.Column("file_identity", sa.String(64), nullable=False),
    # The incarnation allowed to write; opening the store takes it (§6 fencing).
    sa.Column("owner_incarnation_id", sa.String(32), nullable=False),
    sa.Column("owner_since", sa.Float, nullable=False),
    # Durable change counter for WatchOperations cursors.
    sa.Column("last_sequence", sa.BigInteger, nullable=False),
    # The owner's admission floor, microseconds (§6 witness; runner_svc.core.witness).
    sa.Column("admission_floor", sa.BigInteger, nullable=False, server_default="0"),
    # Count and digest of the set of rows: a row removed or added outside the
    # runner is noticed at open.
    sa.Column("row_count", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("row_digest", sa.BigInteger, nullable=False, server_default="0"),
    # The highest stamp bound of a pruned key dropped for good: every later owner
    # starts its admission floor here (PROTOCOL.md §9 K4; storage/retention.py).
    sa.Column("retention_floor", sa.BigInteger, nullable=False, server_default="0"),
    sa.CheckConstraint("id = 1", name="ck_runner_store_meta_single_row"),
)

operations = sa.Table(
    "runner_operations",
    metadata,
    sa.Column("operation_id", sa.String(255), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("execution", sa.String(16), nullable=False),
    sa.Column("incarnation_id", sa.String(32), nullable=False),
    sa.Column("sequence", sa.BigInteger, nullable=False),
    sa.Column("fencing_token", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(16), nullable=True),  # NULL for a tombstone
    sa.Column("envelope_digest", sa.String(64), nullable=False),
    sa.Column("stop_reason", sa.String(16), nullable=True),
    sa.Column("result_output", sa.LargeBinary, nullable=True),
    sa.Column("result_content_type", sa.String(255), nullable=True),
    sa.Column("result_metadata", sa.Text, nullable=True),  # JSON object of str -> str
    sa.Column("error_reason", sa.String(64), nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Column("released", sa.Boolean, nullable=False),
    sa.Column("accepted_at", sa.Float, nullable=True),
    sa.Column("started_at", sa.Float, nullable=True),
    sa.Column("settled_at", sa.Float, nullable=True),
    sa.Column("dispatch_stamp", sa.BigInteger, nullable=False, server_default="0"),
    # What a failed execution declared about effects downstream (NONE, APPLIED;
    # NULL: undeclared) and its retry hint in seconds (migration r0006).
    sa.Column("error_effect", sa.String(16), nullable=True),
    sa.Column("error_retry_after", sa.Float, nullable=True),
    # How many output chunks the execution emitted (R13; the chunks are not stored).
    sa.Column("output_chunks", sa.BigInteger, nullable=False, server_default="0"),
    # Every execution of the row's executor, as JSON (R15; migration r0007;
    # storage/executions_json.py). NULL: none.
    sa.Column("executions", sa.Text, nullable=True),
    # When the store recorded the release (a trigger sets it; §9 K2). Not part of
    # OperationRow: only retention reads it.
    sa.Column("released_at", sa.Float, nullable=True),
    sa.Index("ix_runner_operations_sequence", "sequence", unique=True),
    sa.Index("ix_runner_operations_state", "state"),
    sa.Index("ix_runner_operations_released_at", "released_at"),
    # The rows K6 looks at (migration r0005): few, so a pass never reads the table.
    sa.Index("ix_runner_operations_unreleased", "state", sqlite_where=sa.text("NOT released")),
)

# The bare key of every pruned row (§9 K3): a Dispatch, Cancel or status call for
# it is refused OPERATION_PRUNED, never answered "absent". ``stamp_bound``: no
# Dispatch for the operation carries a higher dispatch_stamp (K4).
pruned_operations = sa.Table(
    "runner_pruned_operations",
    metadata,
    sa.Column("operation_id", sa.String(255), primary_key=True),
    sa.Column("stamp_bound", sa.BigInteger, nullable=False),
    sa.Column("pruned_at", sa.Float, nullable=False),
    sa.Index("ix_runner_pruned_operations_pruned_at", "pruned_at"),
)

# One row per opening of the store, oldest first (append-only, §6 witness).
openings = sa.Table(
    "runner_store_openings",
    metadata,
    sa.Column("position", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("incarnation_id", sa.String(32), nullable=False),
    # "" for the store's first opening.
    sa.Column("predecessor_incarnation_id", sa.String(32), nullable=False),
    sa.Column("predecessor_floor", sa.BigInteger, nullable=False),
    sa.Column("opened_at", sa.Float, nullable=False),
    sa.UniqueConstraint("incarnation_id", name="uq_runner_store_openings_incarnation"),
)

# One row per executor process group launched (R10: executors never outlive
# their runner). The next incarnation ends, before it serves, every group an
# earlier one left running, then writes ended_at (runner_svc/executor_sweep.py).
executor_processes = sa.Table(
    "runner_executor_processes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("operation_id", sa.String(255), nullable=False),
    sa.Column("incarnation_id", sa.String(32), nullable=False),
    sa.Column("pgid", sa.Integer, nullable=False),
    # The leader's start time (clock ticks after boot): a reused pid never matches.
    sa.Column("start_time", sa.BigInteger, nullable=False),
    sa.Column("boot_id", sa.String(64), nullable=False),
    sa.Column("launched_at", sa.Float, nullable=False),
    sa.Column("ended_at", sa.Float, nullable=True),  # NULL: not known to be over
    sa.Column("ended_how", sa.Text, nullable=True),
    sa.Index("ix_runner_executor_processes_ended_at", "ended_at"),
)
