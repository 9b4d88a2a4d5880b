"""The store's per-turn statements as fixed SQL text for the raw ``sqlite3`` driver.

Why not SQLAlchemy Core here: building a statement, its cache key and a pooled
connection checkout cost far more CPU than SQLite's own work for these
one-row statements (issue 10), and they run several times per turn. With fixed
text, ``sqlite3``'s statement cache prepares each statement once per
connection. The cold paths (schema, open, ownership, floor, executor records)
keep SQLAlchemy.

The encoding is the one SQLAlchemy used for ``tables.operations``, so store
files written before and after read the same (tests/runner/storage checks the
stored types and bytes): strings as TEXT, integers as INTEGER, ``released`` as
INTEGER 0/1 (sa.Boolean on SQLite), times as REAL (sa.Float), the output as a
BLOB (sa.LargeBinary) and the metadata as sorted-key JSON TEXT.
"""

from __future__ import annotations

import json
from typing import Any

from runner_svc.core.model import (
    DeclaredEffect,
    Execution,
    OperationRow,
    RowState,
    SlotKind,
    StopReason,
    TurnFailure,
    TurnOutput,
)
from runner_svc.storage import executions_json

# Every column of runner_operations, in one fixed order: the bind tuples and
# the selected tuples below both follow it.
COLUMNS = (
    "operation_id",
    "state",
    "execution",
    "incarnation_id",
    "sequence",
    "fencing_token",
    "attempt",
    "kind",
    "envelope_digest",
    "stop_reason",
    "result_output",
    "result_content_type",
    "result_metadata",
    "error_reason",
    "error_message",
    "released",
    "accepted_at",
    "started_at",
    "settled_at",
    "dispatch_stamp",
    "error_effect",
    "error_retry_after",
    "output_chunks",
    "executions",
)
_LIST = ", ".join(COLUMNS)

SELECT_META = (
    "SELECT owner_incarnation_id, last_sequence, admission_floor, row_count, row_digest "
    "FROM runner_store_meta WHERE id = 1"
)
SELECT_LAST_SEQUENCE = "SELECT last_sequence FROM runner_store_meta WHERE id = 1"
SELECT_NEWEST_ROW = "SELECT coalesce(max(sequence), 0) FROM runner_operations"
SELECT_PRUNED = "SELECT 1 FROM runner_pruned_operations WHERE operation_id = ?"
SELECT_ROW = f"SELECT {_LIST} FROM runner_operations WHERE operation_id = ?"
SELECT_CHANGES = (
    f"SELECT {_LIST} FROM runner_operations WHERE sequence > ? ORDER BY sequence LIMIT ?"
)
INSERT_ROW = f"INSERT INTO runner_operations ({_LIST}) VALUES ({', '.join('?' for _ in COLUMNS)})"
# Every column but the key; the key goes last, for the WHERE.
UPDATE_ROW = (
    "UPDATE runner_operations SET "
    + ", ".join(f"{column} = ?" for column in COLUMNS[1:])
    + " WHERE operation_id = ?"
)
# As SQLAlchemy issued them: an update only moves the sequence; an insert
# also moves the row count and digest (§6).
UPDATE_META_SEQUENCE = "UPDATE runner_store_meta SET last_sequence = ?"
UPDATE_META_INSERTED = (
    "UPDATE runner_store_meta SET last_sequence = ?, row_count = ?, row_digest = ?"
)


def _time(value: float | None) -> float | None:
    # A REAL column stores an int as a float anyway; binding the float makes
    # the row handed back from memory equal the one read back from SQL.
    return None if value is None else float(value)


def to_params(row: OperationRow, sequence: int) -> tuple[Any, ...]:
    """The bind tuple (``COLUMNS`` order) for ``row`` stamped with ``sequence``."""
    result, error = row.result, row.error
    return (
        row.operation_id,
        row.state.value,
        row.execution.value,
        row.incarnation_id,
        sequence,
        row.fencing_token,
        row.attempt,
        row.kind.value if row.kind else None,
        row.envelope_digest,
        row.stop_reason.value if row.stop_reason else None,
        bytes(result.output) if result else None,
        result.content_type if result else None,
        json.dumps(dict(result.metadata), sort_keys=True) if result else None,
        error.reason if error else None,
        error.message if error else None,
        int(bool(row.released)),
        _time(row.accepted_at),
        _time(row.started_at),
        _time(row.settled_at),
        row.dispatch_stamp,
        error.effect.value if error and error.effect else None,
        _time(error.retry_after) if error else None,
        row.output_chunks,
        executions_json.dumps(row.executions),
    )


def update_params(params: tuple[Any, ...]) -> tuple[Any, ...]:
    """``UPDATE_ROW``'s parameters: the columns after the key, then the key."""
    return (*params[1:], params[0])


def to_row(values: tuple[Any, ...]) -> OperationRow:
    """A row from a tuple in ``COLUMNS`` order (selected, or just bound)."""
    (
        operation_id,
        state,
        execution,
        incarnation_id,
        sequence,
        fencing_token,
        attempt,
        kind,
        envelope_digest,
        stop_reason,
        output,
        content_type,
        metadata,
        error_reason,
        error_message,
        released,
        accepted_at,
        started_at,
        settled_at,
        dispatch_stamp,
        error_effect,
        error_retry_after,
        output_chunks,
        executions,
    ) = values
    result = None
    if output is not None:
        result = TurnOutput(
            output=bytes(output),
            content_type=content_type or "",
            metadata=json.loads(metadata or "{}"),
        )
    error = None
    if error_reason is not None:
        error = TurnFailure(
            error_reason,
            error_message or "",
            DeclaredEffect(error_effect) if error_effect else None,
            error_retry_after,
        )
    return OperationRow(
        operation_id=operation_id,
        state=RowState(state),
        execution=Execution(execution),
        incarnation_id=incarnation_id,
        sequence=int(sequence),
        fencing_token=int(fencing_token),
        attempt=int(attempt),
        kind=SlotKind(kind) if kind else None,
        envelope_digest=envelope_digest,
        stop_reason=StopReason(stop_reason) if stop_reason else None,
        result=result,
        error=error,
        released=bool(released),
        accepted_at=accepted_at,
        started_at=started_at,
        settled_at=settled_at,
        dispatch_stamp=int(dispatch_stamp or 0),
        output_chunks=int(output_chunks or 0),
        executions=executions_json.loads(executions),
    )
