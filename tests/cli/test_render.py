"""Tables, live event lines and JSON (pure rendering of SDK values)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from turnwire.cli import render
from turnwire.client import (
    Execution,
    Operation,
    OperationEvent,
    OperationState,
    StopReason,
    Submission,
    TurnError,
    TurnResult,
)

T0 = datetime(2026, 11, 29, 11, 2, 3, 456000, tzinfo=UTC)


def _op(**fields) -> Operation:  # type: ignore[no-untyped-def]
    base = {"operation_id": "op_1", "state": OperationState.RUNNING, "execution": Execution.STARTED}
    return Operation(**{**base, **fields})


@pytest.mark.rule("C11")
def test_detail_shows_billing_truth_and_cancel_race() -> None:
    """get: execution is explained, and a cancel that lost the race says so (C11)."""
    op = _op(
        state=OperationState.SUCCEEDED,
        cancel_requested=True,
        stop_reason=StopReason.CANCEL,
        result=TurnResult(output=b"hello", content_type="text/plain"),
        created_at=T0,
        attempt_count=1,
        runner="r1",
        incarnation_id="ab" * 16,
    )
    text = render.operation_detail(op)
    assert "SUCCEEDED" in text and "STARTED (an executor ran)" in text
    assert "finished first: it stays SUCCEEDED" in text
    assert "5 bytes text/plain: 'hello'" in text
    assert "r1 (incarnation " + "ab" * 16 + ")" in text
    assert "2026-11-29 11:02:03Z" in text
    assert "stop reason  cancel" in text


def test_detail_rows_are_aligned() -> None:
    """Every value starts in the same column."""
    lines = render.operation_detail(_op(error=TurnError("INCARNATION_CHANGED", "r1 restarted")))
    rows = lines.splitlines()
    width = max(len(name) for name, _ in render.operation_fields(_op(error=TurnError("X", ""))))
    assert all(row[width : width + 2] == "  " and row[width + 2] != " " for row in rows)
    assert "INCARNATION_CHANGED: r1 restarted" in lines


def test_unknown_execution_is_spelled_out() -> None:
    """UNKNOWN execution tells the reader nobody can know whether it ran (§2)."""
    text = render.operation_detail(_op(state=OperationState.TIMED_OUT, execution=Execution.UNKNOWN))
    assert "may or may not have run" in text


def test_list_table_has_a_header_and_aligned_columns() -> None:
    """list: one header row, one row per operation, columns aligned."""
    ops = [
        _op(operation_id="op_short", updated_at=T0),
        _op(operation_id="op_much_longer_id", state=OperationState.QUEUED, runner="r2"),
    ]
    lines = render.operations_table(ops).splitlines()
    assert lines[0].split() == ["OPERATION", "STATE", "EXECUTION", "ATTEMPTS", "RUNNER", "UPDATED"]
    state_column = lines[0].index("STATE")
    assert [line[state_column:].split()[0] for line in lines[1:]] == ["RUNNING", "QUEUED"]


def test_event_line_shows_time_transition_execution_and_reason() -> None:
    """watch: each transition as time, #sequence, from -> to, execution, reason."""
    event = OperationEvent(
        operation_id="op_1",
        sequence=7,
        from_state=OperationState.DISPATCH_UNKNOWN,
        to_state=OperationState.TIMED_OUT,
        execution=Execution.UNKNOWN,
        reason="INCARNATION_CHANGED",
        detail="",
        at=T0,
    )
    line = render.event_line(event, arrow="->")
    assert line.startswith("11:02:03.456  #7")
    assert "DISPATCH_UNKNOWN -> TIMED_OUT" in line
    assert line.split()[-2:] == ["UNKNOWN", "INCARNATION_CHANGED"]
    assert line.index("INCARNATION_CHANGED") - line.rindex("UNKNOWN") == len("NOT_STARTED") + 2


def test_first_event_has_no_from_state() -> None:
    """The acceptance event reads '-> QUEUED'."""
    event = OperationEvent("op_1", 1, OperationState.UNSPECIFIED, OperationState.QUEUED,
                           Execution.NOT_STARTED, "", "", T0)  # fmt: skip
    assert "  -> QUEUED" in render.event_line(event, arrow="->")


def test_json_is_stable_and_lossless() -> None:
    """--json: enum names as strings, ISO UTC times, result bytes as base64 (+ text)."""
    op = _op(
        state=OperationState.SUCCEEDED,
        result=TurnResult(output=b"hi", content_type="text/plain"),
        created_at=T0,
    )
    payload = json.loads(json.dumps(render.operation_json(op)))
    assert payload["state"] == "SUCCEEDED" and payload["terminal"] is True
    assert payload["execution"] == "STARTED"
    assert payload["result"]["output_base64"] == "aGk="
    assert payload["result"]["output_text"] == "hi"
    assert payload["created_at"] == "2026-11-29T11:02:03.456000Z"
    assert payload["finished_at"] is None
    sub = render.submission_json(Submission(op, replayed=True, idempotency_key="k"))
    assert sub["replayed"] is True and sub["idempotency_key"] == "k"
    assert sub["operation_id"] == "op_1" and sub["state"] == "SUCCEEDED"


def test_replayed_submission_headline_says_it_is_the_same_operation() -> None:
    """§7: a replayed submit is reported as the same operation, not a new one."""
    line = render.submission_headline(Submission(_op(), replayed=True, idempotency_key="k-9"))
    assert "already submitted" in line and "op_1" in line and "k-9" in line


def test_a_waiting_operation_says_what_it_waits_for() -> None:
    """Issue 9, §8.2: `turnwire get` and --json show the coordinator's live reason."""
    reason = "waiting for a free WRITABLE slot in pool default: 4 of 4 in use on 1 runner(s)"
    op = _op(state=OperationState.QUEUED, execution=Execution.NOT_STARTED, waiting_for=reason)
    assert f"waiting for  {reason}" in render.operation_detail(op)
    assert render.operation_json(op)["waiting_for"] == reason
    assert "waiting for" not in render.operation_detail(_op())
