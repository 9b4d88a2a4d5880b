"""The journal's tables (SQLAlchemy Core), the same on SQLite and PostgreSQL.

Column names equal the field names of ``core.model`` records, so rows and
records convert field by field (``tests/coordinator/storage`` checks they
stay in step). Enums are stored by name as strings. The schema changes only
through a migration in ``migrations/coordinator`` (``alembic check`` keeps
this file and the migrations in step).
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from coordinator_svc.core.model import Execution, OpState

# Stable constraint names: SQLite batch migrations recreate tables and need
# to find constraints by name, and both dialects then agree on names.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on both dialects.

    PostgreSQL keeps the instant (``timestamptz``) but returns it in the
    session's zone; SQLite has no datetime type and SQLAlchemy stores text
    without the offset. So: store UTC (naive text on SQLite, where every
    value is UTC and text order is time order), and attach UTC on the way out.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()} cannot be stored")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def _names(values: type[OpState] | type[Execution]) -> str:
    return ", ".join(f"'{member.value}'" for member in values)


_ID = sa.String(128)
_NAME = sa.String(255)
_DIGEST = sa.String(64)
_ENUM = sa.String(32)

operations = sa.Table(
    "operations",
    metadata,
    sa.Column("operation_id", _ID, primary_key=True),
    sa.Column("principal", _NAME, nullable=False),
    sa.Column("idempotency_key_digest", _DIGEST, nullable=False),
    sa.Column("request_digest", _DIGEST, nullable=False),
    sa.Column("envelope_digest", _DIGEST, nullable=False),
    sa.Column("pool", _NAME, nullable=False),
    sa.Column("kind", _ENUM, nullable=False),
    sa.Column("replay_policy", _ENUM, nullable=False),
    sa.Column("max_attempts", sa.Integer, nullable=False),
    sa.Column("state", _ENUM, nullable=False),
    sa.Column("execution", _ENUM, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.Column("attempt_count", sa.Integer, nullable=False),
    sa.Column("last_attempt_at", UtcDateTime, nullable=True),
    sa.Column("runner", _NAME, nullable=True),
    sa.Column("incarnation_id", _NAME, nullable=True),
    sa.Column("store_id", _NAME, nullable=True),
    sa.Column("acknowledged", sa.Boolean, nullable=False),
    sa.Column("fencing_token", sa.BigInteger, nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("lease_owner", _NAME, nullable=True),
    sa.Column("lease_expires_at", UtcDateTime, nullable=True),
    sa.Column("cancel_requested", sa.Boolean, nullable=False),
    sa.Column("stop_reason", _ENUM, nullable=True),
    sa.Column("result", sa.LargeBinary, nullable=True),
    sa.Column("error_reason", _NAME, nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Column("next_action_at", UtcDateTime, nullable=True),
    sa.Column("unknown_since", UtcDateTime, nullable=True),
    sa.Column("released", sa.Boolean, nullable=False),
    sa.Column("finished_at", UtcDateTime, nullable=True),
    sa.Column("last_event_sequence", sa.BigInteger, nullable=False),
    # Every execution of the executor as the runner reported them (R15): a
    # serialized turnwire.common.v1.ExecutionLog (migration 0008). NULL: none.
    sa.Column("executions", sa.LargeBinary, nullable=True),
    sa.Column("execution_count", sa.Integer, nullable=False, server_default="0"),
    # The database itself enforces one operation per principal + key (§7).
    sa.UniqueConstraint("principal", "idempotency_key_digest"),
    sa.CheckConstraint(f"state IN ({_names(OpState)})", name="state"),
    sa.CheckConstraint(f"execution IN ({_names(Execution)})", name="execution"),
    sa.CheckConstraint("attempt_count >= 0", name="attempt_count"),
    sa.CheckConstraint("version >= 1", name="version"),
)
# list_for_principal pages by (principal, created_at, operation_id).
sa.Index(None, operations.c.principal, operations.c.created_at, operations.c.operation_id)
# due() / in_state() look rows up by state and next_action_at.
sa.Index(None, operations.c.state, operations.c.next_action_at)
# due() finds terminal operations not yet released through (released, state)
# (migration 0009): without it the scan read every operation the journal keeps.
sa.Index("ix_operations_released_state", operations.c.released, operations.c.state)
# Retention (PROTOCOL.md §9 K1) finds terminal operations oldest first by
# finished_at (NULL until terminal, so live rows stay out of the range).
sa.Index(None, operations.c.finished_at)

# The turn as accepted (C1), written once and read when it is sent: kept out
# of the operations row, which every commit rewrites (issue 12: on SQLite an
# UPDATE rewrites the whole record, a 1 MB envelope with it, three times a turn).
operation_envelopes = sa.Table(
    "operation_envelopes",
    metadata,
    sa.Column("operation_id", _ID, sa.ForeignKey("operations.operation_id"), primary_key=True),
    sa.Column("envelope", sa.LargeBinary, nullable=False),
)

attempts = sa.Table(
    "attempts",
    metadata,
    sa.Column("operation_id", _ID, sa.ForeignKey("operations.operation_id"), primary_key=True),
    sa.Column("number", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("runner", _NAME, nullable=False),
    sa.Column("incarnation_id", _NAME, nullable=False),
    sa.Column("store_id", _NAME, nullable=True),
    sa.Column("sent_at", UtcDateTime, nullable=False),
    sa.Column("outcome", _ENUM, nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
)

# Append-only: the journal only ever inserts here (C13).
events = sa.Table(
    "events",
    metadata,
    sa.Column("operation_id", _ID, sa.ForeignKey("operations.operation_id"), primary_key=True),
    sa.Column("sequence", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("from_state", _ENUM, nullable=True),
    sa.Column("to_state", _ENUM, nullable=False),
    sa.Column("execution", _ENUM, nullable=False),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("reason", _NAME, nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
)

# --- The operator's records (issue 13, PROTOCOL.md §10). Beside the operations,
# never in them: an operation's state, execution and events are not rewritten.
# No foreign keys: they are the audit trail and outlive §9's pruning.

# V2/V3: one verdict per operation (sequence 1; the key leaves room for
# superseding records should V3 ever change). Append-only: 0006's triggers
# refuse UPDATE and DELETE.
operator_verdicts = sa.Table(
    "operator_verdicts",
    metadata,
    sa.Column("operation_id", _ID, primary_key=True),
    sa.Column("sequence", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("verdict", _ENUM, nullable=False),
    sa.Column("recorded_by", _NAME, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("recorded_at", UtcDateTime, nullable=False),
    sa.CheckConstraint("verdict IN ('EXECUTED', 'NOT_EXECUTED')", name="verdict"),
)

# V6: an operation requeued at most once; the new one made from at most one.
operation_requeues = sa.Table(
    "operation_requeues",
    metadata,
    sa.Column("operation_id", _ID, primary_key=True),
    sa.Column("requeued_as", _ID, nullable=False, unique=True),
    sa.Column("requeued_by", _NAME, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("requeued_at", UtcDateTime, nullable=False),
)

# V8: a row while the runner is drained.
runner_drains = sa.Table(
    "runner_drains",
    metadata,
    sa.Column("runner", _NAME, primary_key=True),
    sa.Column("drained_by", _NAME, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("drained_at", UtcDateTime, nullable=False),
)

# --- Runner membership (PROTOCOL.md §11 M1): per name, numbered ADDED/REMOVED
# records; the latest decides. Append-only: 0007's triggers refuse UPDATE and
# DELETE.
runner_membership = sa.Table(
    "runner_membership",
    metadata,
    sa.Column("runner", _NAME, primary_key=True),
    sa.Column("sequence", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("action", _ENUM, nullable=False),
    sa.Column("address", _NAME, nullable=False),
    sa.Column("pool", _NAME, nullable=False),
    sa.Column("kinds", sa.String(64), nullable=False),
    sa.Column("recorded_by", _NAME, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("recorded_at", UtcDateTime, nullable=False),
    sa.Column("forced", sa.Boolean, nullable=False),
    sa.Column("bound_turns", sa.Integer, nullable=False),
    sa.CheckConstraint("action IN ('ADDED', 'REMOVED')", name="action"),
    sa.CheckConstraint("sequence >= 1", name="sequence"),
)
