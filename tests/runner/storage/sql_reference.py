"""What the store file says, read the way the store read it before issue 10.

Independent of runner_svc.storage.rows_sql on purpose: the decoding below is
the SQLAlchemy-era ``_to_row`` (by column name, from any connection), so a
test comparing it with the store's answers checks the store's memory and its
raw-SQL encoding against the file, not against themselves.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner_svc.core.model import (
    Execution,
    OperationRow,
    RowState,
    SlotKind,
    StopReason,
    TurnFailure,
    TurnOutput,
)
from runner_svc.storage import executions_json


def _row(values: Mapping[str, Any]) -> OperationRow:
    result = None
    if values["result_output"] is not None:
        result = TurnOutput(
            output=bytes(values["result_output"]),
            content_type=values["result_content_type"] or "",
            metadata=json.loads(values["result_metadata"] or "{}"),
        )
    error = None
    if values["error_reason"] is not None:
        error = TurnFailure(values["error_reason"], values["error_message"] or "")
    return OperationRow(
        operation_id=values["operation_id"],
        state=RowState(values["state"]),
        execution=Execution(values["execution"]),
        incarnation_id=values["incarnation_id"],
        sequence=int(values["sequence"]),
        fencing_token=int(values["fencing_token"]),
        attempt=int(values["attempt"]),
        kind=SlotKind(values["kind"]) if values["kind"] else None,
        envelope_digest=values["envelope_digest"],
        stop_reason=StopReason(values["stop_reason"]) if values["stop_reason"] else None,
        result=result,
        error=error,
        released=bool(values["released"]),
        accepted_at=values["accepted_at"],
        started_at=values["started_at"],
        settled_at=values["settled_at"],
        dispatch_stamp=int(values["dispatch_stamp"] or 0),
        # R15's records: their JSON codec is the column's definition (r0007).
        executions=executions_json.loads(values["executions"]),
    )


def _query(path: Path, sql: str, params: tuple[Any, ...]) -> list[OperationRow]:
    connection = sqlite3.connect(path)
    connection.row_factory = sqlite3.Row
    try:
        return [_row(found) for found in connection.execute(sql, params).fetchall()]
    finally:
        connection.close()


def sql_get(path: Path, operation_id: str) -> OperationRow | None:
    found = _query(path, "SELECT * FROM runner_operations WHERE operation_id = ?", (operation_id,))
    return found[0] if found else None


def sql_changes(path: Path, after: int, limit: int = 500) -> list[OperationRow]:
    return _query(
        path,
        "SELECT * FROM runner_operations WHERE sequence > ? ORDER BY sequence LIMIT ?",
        (after, limit),
    )


def sql_last_sequence(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        return int(connection.execute("SELECT last_sequence FROM runner_store_meta").fetchone()[0])
    finally:
        connection.close()
