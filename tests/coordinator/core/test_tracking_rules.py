"""Tracking running operations (C9) and the durable-store refinement (§6)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.decide import decide
from coordinator_svc.core.events import PreflightAnswer, RunnerReported, Tick
from coordinator_svc.core.model import AttemptOutcome, Execution, OperationRecord, OpState
from coordinator_svc.core.runner_view import RunnerOp
from coordinator_svc.core.runner_view import RunnerOpState as R
from tests.coordinator.core.scenario import (
    INC_A,
    INC_B,
    OTHER_STORE,
    RUNNER,
    STAMP,
    STORE,
    answer,
    attempt,
    attempts_after,
    bound,
    ctx,
    row,
    step,
)

ACCEPTED_1 = attempt(1, AttemptOutcome.ACCEPTED)


def running(**fields: Any) -> OperationRecord:
    return bound(OpState.RUNNING, **fields)


@pytest.mark.rule("C8a", "C9")
def test_absence_read_before_the_acknowledgement_is_stale_not_a_disappearance() -> None:
    """C8a/C9: regression (simulation seed 9904): "absent" asked while DISPATCH_UNKNOWN,
    answered after a watch report made it RUNNING, changes nothing."""
    acknowledged = running(last_event_sequence=5)
    stale = dataclasses.replace(answer(None), asked_sequence=4)
    decision = decide(acknowledged, stale, ctx(ACCEPTED_1))
    assert decision.change is None and decision.commands == ()
    fresh = dataclasses.replace(answer(None), asked_sequence=5)
    record, _ = step(acknowledged, fresh, ctx(ACCEPTED_1))
    assert record.state is OpState.PROTOCOL_ERROR


@pytest.mark.rule("C9")
def test_tick_on_running_polls_status() -> None:
    """C9: the fallback poll asks the bound runner."""
    assert decide(running(), Tick(), ctx(ACCEPTED_1)).commands == (cmd.Preflight(RUNNER),)


@pytest.mark.rule("C9")
def test_running_absent_on_the_same_incarnation_is_a_protocol_error() -> None:
    """C9: an acknowledged operation that vanishes: PROTOCOL_ERROR (DISAPPEARED)."""
    record, decision = step(running(), answer(None), ctx(ACCEPTED_1))
    assert record.state is OpState.PROTOCOL_ERROR
    assert record.error_reason == "ACKNOWLEDGED_OPERATION_DISAPPEARED"
    assert record.execution is Execution.UNKNOWN
    assert decision.commands == ()


@pytest.mark.rule("C9")
def test_running_on_a_new_incarnation_times_out_incarnation_changed() -> None:
    """C9: the bound incarnation died (no durable store): TIMED_OUT INCARNATION_CHANGED."""
    record, _ = step(running(), answer(None, incarnation=INC_B), ctx(ACCEPTED_1))
    assert record.state is OpState.TIMED_OUT
    assert record.error_reason == "INCARNATION_CHANGED"
    assert record.execution is Execution.UNKNOWN


@pytest.mark.rule("C14")
def test_confirmed_start_survives_the_incarnation_change() -> None:
    """C14: a start the runner confirmed stays STARTED after an incarnation change."""
    before = running(execution=Execution.STARTED)
    record, _ = step(before, answer(None, incarnation=INC_B), ctx(ACCEPTED_1))
    assert record.execution is Execution.STARTED


@pytest.mark.rule("C9", "C10")
def test_watch_report_of_a_finished_row_is_adopted() -> None:
    """C9/C10: the watch shows the terminal row: adopt it and release."""
    done = row(R.FAILED, Execution.STARTED, error_reason="EXECUTOR_FAILED")
    record, decision = step(running(), RunnerReported(RUNNER, INC_A, done), ctx(ACCEPTED_1))
    assert record.state is OpState.FAILED and record.error_reason == "EXECUTOR_FAILED"
    assert isinstance(decision.commands[0], cmd.Release)


@pytest.mark.rule("C9", "C8a")
def test_watch_report_from_another_incarnation_asks_status() -> None:
    """C9/C8a: a changed incarnation on the stream is checked by a status call, not adopted."""
    report = RunnerReported(RUNNER, INC_B, row(R.SUCCEEDED, Execution.STARTED, INC_B))
    decision = decide(running(), report, ctx(ACCEPTED_1))
    assert decision.change is None
    assert decision.commands == (cmd.Preflight(RUNNER),)


@pytest.mark.parametrize(
    ("runner_state", "expected", "reason"),
    [
        (R.INTERRUPTED, OpState.TIMED_OUT, "INTERRUPTED"),
        (R.TIMED_OUT, OpState.TIMED_OUT, "DEADLINE_EXCEEDED"),
        (R.CANCELLED, OpState.CANCELLED, "CANCELLED"),
        (R.TOMBSTONED, OpState.CANCELLED, "CANCELLED"),
    ],
)
def test_runner_state_mapping(runner_state: R, expected: OpState, reason: str) -> None:
    """§2 mapping: INTERRUPTED -> TIMED_OUT INTERRUPTED, TOMBSTONED -> CANCELLED, others same."""
    record, _ = step(running(), answer(row(runner_state)), ctx(ACCEPTED_1))
    assert record.state is expected and record.error_reason == reason


# --- §6: the same durable store after a restart ---


def durable(op: RunnerOp | None = None, store: str = STORE, asked: int = 1) -> PreflightAnswer:
    return answer(op, incarnation=INC_B, store=store, durable=True, asked=asked)


def test_same_durable_store_finished_result_is_adopted() -> None:
    """§6: a changed incarnation on the same durable store: the finished result is adopted."""
    done = row(R.SUCCEEDED, Execution.STARTED, INC_A, result=b"kept")
    record, _ = step(running(), durable(done), ctx(ACCEPTED_1))
    assert record.state is OpState.SUCCEEDED and record.result == b"kept"
    assert record.incarnation_id == INC_B


@pytest.mark.rule("R3")
def test_same_durable_store_started_never_settled_is_timed_out_started() -> None:
    """§6/R3: a confirmed start never settled: TIMED_OUT, execution STARTED."""
    stuck = row(R.RUNNING, Execution.STARTED, INC_A)
    record, _ = step(running(), durable(stuck), ctx(ACCEPTED_1))
    assert record.state is OpState.TIMED_OUT and record.execution is Execution.STARTED


@pytest.mark.rule("R3")
def test_same_durable_store_intent_only_is_timed_out_unknown() -> None:
    """§6/R3: a launch intent without confirmation: TIMED_OUT, execution UNKNOWN."""
    intent = row(R.LAUNCHING, Execution.UNKNOWN, INC_A)
    record, _ = step(running(), durable(intent), ctx(ACCEPTED_1))
    assert record.state is OpState.TIMED_OUT and record.execution is Execution.UNKNOWN


def test_same_durable_store_accepted_never_launched_is_dispatched_again() -> None:
    """§6: accepted, never launched: RUNNING -> DISPATCH_UNKNOWN, then replayed to the new one."""
    rows = (ACCEPTED_1,)
    old = row(R.ACCEPTED, None, INC_A)
    unknown, decision = step(running(), durable(old), ctx(*rows))
    assert unknown.state is OpState.DISPATCH_UNKNOWN and unknown.incarnation_id == INC_B
    assert decision.again and not unknown.acknowledged
    assert decide(unknown, Tick(), ctx(*rows)).commands == (cmd.Preflight(RUNNER),)
    replay, decision = step(unknown, durable(old), ctx(*rows))
    assert replay.state is OpState.DISPATCHING and replay.attempt_count == 2
    assert decision.commands == (cmd.Dispatch(RUNNER, 2, INC_B, replay.fencing_token, STAMP),)


def test_same_durable_store_absence_licenses_a_replay_to_the_new_incarnation() -> None:
    """§6: absence in the same durable store proves the Dispatch never arrived."""
    before = bound(OpState.DISPATCH_UNKNOWN)
    record, decision = step(before, durable(None), ctx(attempt(1)))
    assert record.state is OpState.DISPATCHING and record.incarnation_id == INC_B
    assert decision.commands == (cmd.Dispatch(RUNNER, 2, INC_B, record.fencing_token, STAMP),)


@pytest.mark.rule("C9")
def test_same_durable_store_losing_an_acknowledged_row_is_a_protocol_error() -> None:
    """§6/C9: the durable store no longer has a row it acknowledged."""
    record, _ = step(running(), durable(None), ctx(ACCEPTED_1))
    assert record.state is OpState.PROTOCOL_ERROR


def test_copied_store_is_not_the_same_store() -> None:
    """§6: a restored or copied store has a new store_id: its absence proves nothing."""
    before = bound(OpState.DISPATCH_UNKNOWN)
    record, _ = step(before, durable(None, store=OTHER_STORE), ctx(attempt(1)))
    assert record.state is OpState.TIMED_OUT and record.error_reason == "INCARNATION_CHANGED"


@pytest.mark.rule("C8")
def test_readmitted_row_on_the_new_incarnation_is_adopted_from_unknown() -> None:
    """§6/C8: re-admitted by the new incarnation: adopt as RUNNING bound to it."""
    before = bound(OpState.DISPATCH_UNKNOWN)
    live = row(R.RUNNING, Execution.STARTED, INC_B)
    record, decision = step(before, durable(live), ctx(attempt(1)))
    assert record.state is OpState.RUNNING and record.incarnation_id == INC_B
    rows = attempts_after((attempt(1),), decision)
    assert rows[0].outcome is AttemptOutcome.ACCEPTED


@pytest.mark.rule("C10")
def test_settled_watch_report_while_dispatching_is_a_fast_result() -> None:
    """C10 fast path: a settled row on the bound incarnation ends DISPATCHING directly."""
    before = bound(OpState.DISPATCHING)
    done = row(R.SUCCEEDED, Execution.STARTED, result=b"fast")
    rows = (attempt(1, AttemptOutcome.PENDING),)
    record, decision = step(before, RunnerReported(RUNNER, INC_A, done), ctx(*rows))
    assert record.state is OpState.SUCCEEDED
    assert attempts_after(rows, decision)[0].outcome is AttemptOutcome.ACCEPTED


@pytest.mark.rule("C8a")
def test_unsettled_watch_report_while_dispatching_waits_for_the_reply() -> None:
    """C8a: while a Dispatch is in flight an unsettled row is left to its reply."""
    before = bound(OpState.DISPATCHING)
    report = RunnerReported(RUNNER, INC_A, row(R.ACCEPTED))
    decision = decide(before, report, ctx(attempt(1, AttemptOutcome.PENDING)))
    assert decision.change is None and decision.commands == ()


@pytest.mark.rule("C9")
def test_fallback_poll_of_a_running_operation_pushes_the_next_poll() -> None:
    """C9: a status poll that finds it still running schedules the next poll durably."""
    before = running()
    record, decision = step(before, answer(row(R.RUNNING, Execution.STARTED)), ctx(ACCEPTED_1))
    assert decision.change is not None and decision.change.event is None
    assert record.state is OpState.RUNNING
    assert record.next_action_at is not None and record.next_action_at > before.updated_at
