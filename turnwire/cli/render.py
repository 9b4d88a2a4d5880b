"""How operations and events look: aligned text for people, JSON for scripts.

Pure functions from SDK values to strings and dicts; the commands print them.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from turnwire.cli.render_executions import execution_rows, executions_json
from turnwire.client import (
    Execution,
    Operation,
    OperationEvent,
    OperationState,
    OperatorVerdict,
    ReplayPolicy,
    StopReason,
    Submission,
    TurnKind,
    TurnResult,
)

UNSET = "-"
_PREVIEW_CHARS = 60
_EXECUTION_WIDTH = max(len(value.value) for value in Execution)


def flag_spelling(value: str) -> str:
    """Enum names as the flags spell them: READ_ONLY -> read-only."""
    return value.lower().replace("_", "-")


def clock_time(moment: datetime | None) -> str:
    """A full UTC timestamp: 2026-11-29 11:02:03Z."""
    return UNSET if moment is None else moment.strftime("%Y-%m-%d %H:%M:%SZ")


def event_time(moment: datetime | None) -> str:
    """The time of day of an event, to the millisecond: 11:02:03.123."""
    if moment is None:
        return UNSET.ljust(12)
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces; the last column is not padded."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = []
    for row in (headers, *rows):
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _preview(result: TurnResult) -> str:
    size = f"{len(result.output)} bytes" + (
        f" {result.content_type}" if result.content_type else ""
    )
    try:
        text = result.output.decode("utf-8")
    except UnicodeDecodeError:
        return size
    if not text.isprintable():
        text = text.replace("\n", "\\n")
        if not text.isprintable():
            return size
    shown = text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 1] + "…"
    return f"{size}: {shown!r}" if text else size


def _attempts(operation: Operation) -> str:
    text = str(operation.attempt_count)
    if operation.max_attempts:
        text += f" of {operation.max_attempts}"
    if operation.last_attempt_at is not None:
        text += f" (last {clock_time(operation.last_attempt_at)})"
    return text


def _runner(operation: Operation) -> str:
    if not operation.runner:
        return UNSET
    if operation.incarnation_id:
        return f"{operation.runner} (incarnation {operation.incarnation_id})"
    return operation.runner


def _cancel_note(operation: Operation) -> str | None:
    if operation.cancel_lost_race:
        return "requested, but the turn finished first: it stays SUCCEEDED"
    if operation.cancel_requested:
        return "requested"
    return None


def _execution_note(operation: Operation) -> str:
    notes = {
        Execution.NOT_STARTED: "NOT_STARTED (no executor ran: nothing to bill)",
        Execution.STARTED: "STARTED (an executor ran)",
        Execution.UNKNOWN: "UNKNOWN (it may or may not have run; nobody can know)",
    }
    return notes.get(operation.execution, operation.execution.value)


def _named(value: TurnKind | ReplayPolicy | StopReason) -> str | None:
    return None if value.value == "UNSPECIFIED" else flag_spelling(value.value)


def operation_fields(operation: Operation) -> list[tuple[str, str]]:
    """The rows of `turnwire get`, in reading order, unset ones left out."""
    rows: list[tuple[str, str | None]] = [
        ("operation", operation.operation_id),
        ("state", operation.state.value),
        ("execution", _execution_note(operation)),
        ("attempts", _attempts(operation)),
        *execution_rows(operation),
        ("runner", _runner(operation)),
        ("pool", operation.pool or None),
        (
            "kind",
            flag_spelling(operation.kind) if operation.kind is not TurnKind.UNSPECIFIED else None,
        ),
        (
            "policy",
            flag_spelling(operation.replay_policy)
            if operation.replay_policy is not ReplayPolicy.UNSPECIFIED
            else None,
        ),
        (
            "stop reason",
            flag_spelling(operation.stop_reason)
            if operation.stop_reason is not StopReason.UNSPECIFIED
            else None,
        ),
        ("cancel", _cancel_note(operation)),
        ("waiting for", operation.waiting_for or None),
        ("result", _preview(operation.result) if operation.result is not None else None),
        (
            "error",
            f"{operation.error.reason}: {operation.error.message}".rstrip(": ")
            if operation.error is not None
            else None,
        ),
        ("created", clock_time(operation.created_at)),
        ("updated", clock_time(operation.updated_at)),
        ("finished", clock_time(operation.finished_at) if operation.finished_at else None),
        ("events", str(operation.last_event_sequence)),
        ("verdict", verdict_note(operation.verdict) if operation.verdict is not None else None),
        ("requeued from", operation.requeued_from or None),
        ("requeued as", operation.requeued_as or None),
    ]
    return [(name, value) for name, value in rows if value is not None]


def verdict_note(verdict: OperatorVerdict) -> str:
    """An operator's verdict in one line: what, who, when, why."""
    return (
        f"{verdict.verdict.value} by {verdict.by} at {clock_time(verdict.at)}: {verdict.reason}"
        " (an operator's record; state and execution stay as recorded)"
    )


def verdict_json(verdict: OperatorVerdict | None) -> dict[str, Any] | None:
    if verdict is None:
        return None
    return {
        "verdict": verdict.verdict.value,
        "by": verdict.by,
        "reason": verdict.reason,
        "at": _iso(verdict.at),
    }


def operation_detail(operation: Operation) -> str:
    rows = operation_fields(operation)
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


def operations_table(operations: Sequence[Operation]) -> str:
    headers = ("OPERATION", "STATE", "EXECUTION", "ATTEMPTS", "RUNNER", "UPDATED")
    rows = [
        (
            op.operation_id,
            op.state.value,
            op.execution.value,
            str(op.attempt_count),
            op.runner or UNSET,
            clock_time(op.updated_at or op.created_at),
        )
        for op in operations
    ]
    return table(headers, rows)


def event_line(event: OperationEvent, arrow: str = "→") -> str:
    """One live transition: time, sequence, from -> to, execution, reason."""
    source = "" if event.from_state is OperationState.UNSPECIFIED else event.from_state.value
    move = (
        f"{source} {arrow} {event.to_state.value}" if source else f"{arrow} {event.to_state.value}"
    )
    execution = event.execution.value.ljust(_EXECUTION_WIDTH)
    parts = [event_time(event.at), f"#{event.sequence:<3}", move.ljust(34), execution]
    why = ": ".join(part for part in (event.reason, event.detail) if part)
    if why:
        parts.append(why)
    return "  ".join(parts).rstrip()


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def operation_json(operation: Operation) -> dict[str, Any]:
    """The one JSON shape of an operation (get, list, cancel, submit and every watch
    event's snapshot): enum names as strings, times ISO 8601 UTC, bytes base64."""
    result: dict[str, Any] | None = None
    if operation.result is not None:
        result = {
            "output_base64": base64.b64encode(operation.result.output).decode("ascii"),
            "content_type": operation.result.content_type,
            "metadata": dict(operation.result.metadata),
        }
        with contextlib.suppress(UnicodeDecodeError):
            result["output_text"] = operation.result.output.decode("utf-8")
    return {
        "operation_id": operation.operation_id,
        "state": operation.state.value,
        "terminal": operation.is_terminal,
        "execution": operation.execution.value,
        "attempt_count": operation.attempt_count,
        "max_attempts": operation.max_attempts,
        "last_attempt_at": _iso(operation.last_attempt_at),
        "runner": operation.runner,
        "incarnation_id": operation.incarnation_id,
        "pool": operation.pool,
        "kind": operation.kind.value,
        "replay_policy": operation.replay_policy.value,
        "stop_reason": operation.stop_reason.value,
        "cancel_requested": operation.cancel_requested,
        "cancel_lost_race": operation.cancel_lost_race,
        "result": result,
        "error": (
            None
            if operation.error is None
            else {"reason": operation.error.reason, "message": operation.error.message}
        ),
        "created_at": _iso(operation.created_at),
        "updated_at": _iso(operation.updated_at),
        "finished_at": _iso(operation.finished_at),
        "last_event_sequence": operation.last_event_sequence,
        "envelope_digest": operation.envelope_digest,
        "waiting_for": operation.waiting_for,
        "verdict": verdict_json(operation.verdict),
        "requeued_from": operation.requeued_from,
        "requeued_as": operation.requeued_as,
        **executions_json(operation),
    }


def event_json(event: OperationEvent) -> dict[str, Any]:
    return {
        "operation_id": event.operation_id,
        "sequence": event.sequence,
        "from_state": event.from_state.value,
        "to_state": event.to_state.value,
        "execution": event.execution.value,
        "reason": event.reason,
        "detail": event.detail,
        "at": _iso(event.at),
        "terminal": event.is_terminal,
    }


# What `submit --json` adds to the operation (a submission is an operation plus these).
SUBMISSION_KEYS = ("idempotency_key", "replayed")


def submission_json(submission: Submission) -> dict[str, Any]:
    """The operation as `get --json` prints it, plus the key it was submitted with and
    whether that key had been used before (``replayed``): one flat shape."""
    return {
        **operation_json(submission.operation),
        "idempotency_key": submission.idempotency_key,
        "replayed": submission.replayed,
    }


def submission_headline(submission: Submission) -> str:
    operation_id = submission.operation.operation_id
    if submission.replayed:
        return (
            f"already submitted with key {submission.idempotency_key}: "
            f"the same operation {operation_id}"
        )
    return f"submitted {operation_id} (idempotency key {submission.idempotency_key})"
