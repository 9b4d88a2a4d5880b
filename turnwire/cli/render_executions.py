"""How `turnwire get` and `submit --wait` show a turn's executions (PROTOCOL.md R15).

One row says how many executions ran, and for a single one that did not
succeed, why it was not retried; with more than one, each gets a row with its
outcome and declared effect. A reader can always tell whether more than one
execution happened (each may have been billed), and why.
"""

from __future__ import annotations

from typing import Any

from turnwire.client import ExecutionOutcome, ExecutionRecord, Operation, OperationState


def execution_rows(operation: Operation) -> list[tuple[str, str]]:
    """The "executions" row, then one "execution N" row each when there are several."""
    count = operation.execution_count
    if count == 0 and not operation.is_terminal:
        return []
    text = str(count)
    if operation.retry is not None and operation.retry.max_retries:
        text += f" of at most {1 + operation.retry.max_retries}"
    why = _why_not_retried(operation)
    if why:
        text += f" ({why})"
    rows = [("executions", text)]
    if count > 1:
        rows += [(f"execution {e.number}", _execution_text(e)) for e in operation.executions]
    return rows


def _execution_text(record: ExecutionRecord) -> str:
    if record.outcome is ExecutionOutcome.UNSPECIFIED:
        text = "not ended" if not record.reason else record.reason
    else:
        text = record.outcome.value
    if record.outcome is not ExecutionOutcome.SUCCEEDED and record.reason:
        text += f" {record.reason}" if record.reason != text else ""
    if record.outcome is ExecutionOutcome.FAILED:
        text += f", effect {record.effect.value if record.effect else 'not declared'}"
    return text


def _why_not_retried(operation: Operation) -> str:
    """For a terminal turn that did not succeed: why its last execution was the last."""
    if not operation.is_terminal or operation.state is OperationState.SUCCEEDED:
        return ""
    last = operation.executions[-1] if operation.executions else None
    if last is None:
        return "" if operation.execution_count == 0 else "not retried"
    if last.outcome is not ExecutionOutcome.FAILED:
        return "a stop or timeout is never retried" if operation.execution_count == 1 else ""
    if last.effect is None:
        return "not retried: the executor declared no effect, so a retry could bill twice"
    if last.effect.value == "APPLIED":
        return "not retried: effect APPLIED"
    if operation.retry is None or not operation.retry.max_retries:
        return "not retried: no retry policy; effect NONE, so --max-retries N would retry it"
    if operation.execution_count >= 1 + operation.retry.max_retries:
        return "retries exhausted"
    return "not retried: the next wait would pass the deadline or budget"


def executions_json(operation: Operation) -> dict[str, Any]:
    """The executions fields of `--json` output."""
    return {
        "execution_count": operation.execution_count,
        "result_execution": operation.result_execution,
        "executions": [
            {
                "number": e.number,
                "execution": e.execution,
                "outcome": e.outcome.value,
                "reason": e.reason,
                "message": e.message,
                "effect": e.effect.value if e.effect else None,
                "retry_after": e.retry_after,
                "retry_reason": e.retry_reason,
                "started_at": e.started_at.isoformat() if e.started_at else None,
                "ended_at": e.ended_at.isoformat() if e.ended_at else None,
            }
            for e in operation.executions
        ],
        "retry": (
            None
            if operation.retry is None
            else {
                "max_retries": operation.retry.max_retries,
                "initial_backoff": operation.retry.initial_backoff,
                "max_backoff": operation.retry.max_backoff,
                "multiplier": operation.retry.multiplier,
            }
        ),
    }
