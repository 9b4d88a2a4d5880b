"""A row's execution records (R15) as the JSON text of ``runner_operations.executions``.

One column, written in the same statement as the row change it belongs to,
so an execution's launch intent, start and end are exactly as durable as the
row's (R3 per execution). NULL reads as no executions: every row written
before migration r0007, and every row never launched.
"""

from __future__ import annotations

import json
from typing import Any

from runner_svc.core.model import (
    DeclaredEffect,
    Execution,
    ExecutionRecord,
    RowState,
    TurnFailure,
)


def dumps(records: tuple[ExecutionRecord, ...]) -> str | None:
    if not records:
        return None
    return json.dumps([_encode(r) for r in records], sort_keys=True, separators=(",", ":"))


def loads(text: str | None) -> tuple[ExecutionRecord, ...]:
    if not text:
        return ()
    return tuple(_decode(item) for item in json.loads(text))


def _encode(record: ExecutionRecord) -> dict[str, Any]:
    error = record.error
    return {
        "n": record.number,
        "execution": record.execution.value,
        "launched_at": record.launched_at,
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "outcome": record.outcome.value if record.outcome else None,
        "reason": error.reason if error else None,
        "message": error.message if error else None,
        "effect": error.effect.value if error and error.effect else None,
        "retry_after": error.retry_after if error else None,
        "retry_reason": record.retry_reason,
    }


def _decode(item: dict[str, Any]) -> ExecutionRecord:
    error = None
    if item.get("reason") is not None:
        effect = item.get("effect")
        error = TurnFailure(
            item["reason"],
            item.get("message") or "",
            DeclaredEffect(effect) if effect else None,
            item.get("retry_after"),
        )
    outcome = item.get("outcome")
    return ExecutionRecord(
        number=int(item["n"]),
        launched_at=float(item["launched_at"]),
        execution=Execution(item["execution"]),
        started_at=item.get("started_at"),
        ended_at=item.get("ended_at"),
        outcome=RowState(outcome) if outcome else None,
        error=error,
        retry_reason=item.get("retry_reason") or "",
    )
