"""R15 in the pure job machine and the row table: what is retried, when, and how it is recorded.

Pure: events in, commands out, as tests/runner/unit/test_job_lifecycle.py.
"""

from __future__ import annotations

import pytest

from runner_svc.core.job_lifecycle import (
    ArmRetryTimer,
    CancelRequested,
    DrainStarted,
    ExecutionEndFailed,
    ExecutionEndWritten,
    ExecutorFinished,
    ExecutorStarted,
    ExecutorStartFailed,
    JobState,
    LaunchChecked,
    LaunchIntentWritten,
    Phase,
    RetryTimerFired,
    StartExecutor,
    WriteExecutionEnd,
    WriteLaunchIntent,
    WriteSettlement,
    WriteStopReason,
    admitted,
)
from runner_svc.core.model import (
    DeclaredEffect,
    Execution,
    RowState,
    StopReason,
    TurnFailure,
    TurnOutput,
)
from runner_svc.core.settlement import ReportedOutcome
from runner_svc.core.transitions import (
    ConfirmStart,
    EndExecution,
    IllegalRowEvent,
    LaunchIntent,
    RetryIntent,
    Settle,
    apply,
)
from tests.runner.unit.test_job_lifecycle import FAILURE, KNOWN, SUCCESS, feed, settlements
from tests.runner.unit.test_row_transitions import OURS, row
from turnwire.retry_policy import RetryRule, problems

S = RowState
NO_EFFECT = ReportedOutcome(
    succeeded=False, error_reason="EXECUTOR_FAILED", error_message="429", effect="NONE"
)
SUCCESS_OUTPUT = TurnOutput(b"ok")
APPLIED = ReportedOutcome(succeeded=False, error_reason="EXECUTOR_FAILED", effect="APPLIED")
POLICY = RetryRule(max_retries=2, initial_backoff=1.0, max_backoff=10.0, multiplier=2.0)


def running(
    policy: RetryRule | None = POLICY, *, deadline: float | None = None, budget: float | None = None
) -> JobState:
    """A job whose first execution started at t=100."""
    state, _ = feed(
        admitted(OURS, deadline=deadline, budget_seconds=budget, retry=policy),
        LaunchChecked(row(S.ACCEPTED), now=99.0),
        LaunchIntentWritten(),
        ExecutorStarted(at=100.0),
    )
    assert state.phase is Phase.RUNNING and state.execution_number == 1
    return state


@pytest.mark.rule("R15")
def test_a_failure_declared_none_waits_its_backoff_then_launches_the_next_execution() -> None:
    """R15: effect NONE, retries left: the execution's end is written (no settlement),
    the retry timer is armed after it, and the next execution gets its own intent."""
    state, commands = feed(running(), ExecutorFinished(NO_EFFECT, KNOWN, now=101.0))
    assert state.phase is Phase.BACKOFF and not settlements(commands)
    assert isinstance(commands[-1], WriteExecutionEnd)  # after withdrawing the confirmation
    state, commands = feed(state, ExecutionEndWritten())
    assert commands == [ArmRetryTimer(102.0)]
    state, commands = feed(state, RetryTimerFired(now=101.5))
    assert commands == [] and state.phase is Phase.BACKOFF  # too early: nothing
    state, commands = feed(state, RetryTimerFired(now=102.0))
    assert len(commands) == 1 and isinstance(commands[0], WriteLaunchIntent)
    assert commands[0].number == 2 and "effect NONE" in commands[0].reason
    state, commands = feed(state, LaunchIntentWritten())
    assert commands == [StartExecutor()] and state.execution_number == 2


@pytest.mark.rule("R15")
@pytest.mark.parametrize(
    "outcome",
    [APPLIED, FAILURE, ReportedOutcome(succeeded="yes")],
    ids=["applied", "undeclared", "malformed"],
)
def test_a_failure_not_declared_none_is_final(outcome: ReportedOutcome) -> None:
    """R15: APPLIED, nothing declared, or a malformed outcome settles at once: no retry."""
    state, commands = feed(running(), ExecutorFinished(outcome, KNOWN, now=101.0))
    assert state.phase is Phase.SETTLING
    assert settlements(commands) == [(S.FAILED, settlements(commands)[0][1], Execution.STARTED)]


@pytest.mark.rule("R15")
def test_success_and_no_policy_are_final() -> None:
    """R15: a success is never retried; without a policy a NONE failure settles FAILED."""
    _, commands = feed(running(), ExecutorFinished(SUCCESS, KNOWN, now=101.0))
    assert settlements(commands) == [(S.SUCCEEDED, "", Execution.STARTED)]
    _, commands = feed(running(None), ExecutorFinished(NO_EFFECT, KNOWN, now=101.0))
    assert settlements(commands) == [(S.FAILED, "EXECUTOR_FAILED", Execution.STARTED)]


@pytest.mark.rule("R15")
def test_a_stopped_turn_is_not_retried() -> None:
    """R15: a failure after a stop (cancel) is the stop's doing: settled, never retried."""
    state, _ = feed(running(), CancelRequested(row(S.RUNNING)))
    _, commands = feed(state, ExecutorFinished(NO_EFFECT, KNOWN, now=101.0))
    assert settlements(commands) == [(S.CANCELLED, "CANCELLED", Execution.STARTED)]


@pytest.mark.rule("R15")
def test_retries_stop_at_max_retries() -> None:
    """R15: at most 1 + max_retries executions; the last failure settles FAILED."""
    state = running(RetryRule(max_retries=1, initial_backoff=0.0))
    state, _ = feed(
        state,
        ExecutorFinished(NO_EFFECT, KNOWN, now=101.0),
        ExecutionEndWritten(),
        RetryTimerFired(now=101.0),
        LaunchIntentWritten(),
        ExecutorStarted(at=101.1),
    )
    assert state.execution_number == 2 and state.phase is Phase.RUNNING
    _, commands = feed(state, ExecutorFinished(NO_EFFECT, KNOWN, now=102.0))
    assert settlements(commands) == [(S.FAILED, "EXECUTOR_FAILED", Execution.STARTED)]


@pytest.mark.rule("R15")
def test_no_retry_whose_wait_would_reach_the_deadline_or_the_budget() -> None:
    """R15: never past the deadline or budget: the failure settles instead."""
    _, commands = feed(running(deadline=101.5), ExecutorFinished(NO_EFFECT, KNOWN, now=101.0))
    assert settlements(commands) == [(S.FAILED, "EXECUTOR_FAILED", Execution.STARTED)]
    _, commands = feed(running(budget=1.5), ExecutorFinished(NO_EFFECT, KNOWN, now=101.0))
    assert settlements(commands) == [(S.FAILED, "EXECUTOR_FAILED", Execution.STARTED)]


@pytest.mark.rule("R15")
def test_the_executors_retry_after_hint_lengthens_the_wait() -> None:
    """R15: the wait is the larger of the backoff and the executor's retry_after."""
    hinted = ReportedOutcome(succeeded=False, effect="NONE", retry_after=5.0)
    state, _ = feed(running(), ExecutorFinished(hinted, KNOWN, now=101.0))
    _, commands = feed(state, ExecutionEndWritten())
    assert commands == [ArmRetryTimer(106.0)]


@pytest.mark.rule("R15")
@pytest.mark.parametrize(
    ("event", "reason", "state"),
    [
        (CancelRequested(row(S.RUNNING)), StopReason.CANCEL, S.CANCELLED),
        (DrainStarted(), StopReason.SHUTDOWN, S.CANCELLED),
    ],
    ids=["cancel", "drain"],
)
def test_a_stop_during_the_wait_settles_with_that_stop_and_nothing_more_runs(
    event: CancelRequested | DrainStarted, reason: StopReason, state: RowState
) -> None:
    """R15: a stop in BACKOFF records the stop and settles; the timer then does nothing."""
    waiting, _ = feed(
        running(), ExecutorFinished(NO_EFFECT, KNOWN, now=101.0), ExecutionEndWritten()
    )
    stopped, commands = feed(waiting, event)
    assert commands[0] == WriteStopReason(reason)
    assert [
        (c.decision.state, c.execution) for c in commands if isinstance(c, WriteSettlement)
    ] == [(state, Execution.STARTED)]
    _, after = feed(stopped, RetryTimerFired(now=200.0))
    assert after == []


@pytest.mark.rule("R15", "R7")
def test_an_unsaved_execution_end_holds_the_slot_and_never_retries() -> None:
    """R15/R7: the end of a billed execution not saved: HELD, no timer, no retry."""
    state, _ = feed(running(), ExecutorFinished(NO_EFFECT, KNOWN, now=101.0))
    state, commands = feed(state, ExecutionEndFailed(), RetryTimerFired(now=500.0))
    assert state.phase is Phase.HELD and commands == []


@pytest.mark.rule("R15")
def test_a_retry_whose_start_is_refused_settles_started_with_its_own_truth() -> None:
    """R15: the row says STARTED (execution 1 ran); the refused retry's record NOT_STARTED."""
    state, _ = feed(
        running(),
        ExecutorFinished(NO_EFFECT, KNOWN, now=101.0),
        ExecutionEndWritten(),
        RetryTimerFired(now=102.0),
        LaunchIntentWritten(),
    )
    _, commands = feed(state, ExecutorStartFailed("gone", may_have_started=False))
    (settle,) = [c for c in commands if isinstance(c, WriteSettlement)]
    assert (settle.execution, settle.current_execution) == (
        Execution.STARTED,
        Execution.NOT_STARTED,
    )


# --- the row (transitions.py) ----------------------------------------------------------

NONE_FAILURE = TurnFailure("EXECUTOR_FAILED", "429", DeclaredEffect.NONE, 2.0)


@pytest.mark.rule("R15")
def test_the_row_records_each_execution_and_settles_the_last() -> None:
    """R15: intent -> start -> end (NONE) -> retry intent -> start -> settled: two records."""
    r = apply(row(S.ACCEPTED), LaunchIntent(OURS, 1.0))
    r = apply(r, ConfirmStart(OURS, 2.0))
    r = apply(r, EndExecution(OURS, 3.0, NONE_FAILURE))
    assert (r.state, r.execution) == (S.RUNNING, Execution.STARTED)
    r = apply(r, RetryIntent(OURS, 4.0, "why"))
    assert r.executions[-1].execution is Execution.UNKNOWN  # intent alone (R3)
    r = apply(r, ConfirmStart(OURS, 5.0))
    r = apply(r, Settle(OURS, S.SUCCEEDED, Execution.STARTED, 6.0, result=SUCCESS_OUTPUT))
    first, second = r.executions
    assert (first.number, first.outcome, first.error) == (1, S.FAILED, NONE_FAILURE)
    assert (second.number, second.outcome, second.started_at) == (2, S.SUCCEEDED, 5.0)
    assert second.retry_reason == "why" and r.started_at == 2.0


@pytest.mark.rule("R15")
def test_the_row_refuses_a_retry_that_could_bill_twice_or_overlap() -> None:
    """R15: no retry intent while an execution is open, after an APPLIED or undeclared
    failure, on a stopped row, or from another incarnation."""
    launched = apply(apply(row(S.ACCEPTED), LaunchIntent(OURS, 1.0)), ConfirmStart(OURS, 2.0))
    with pytest.raises(IllegalRowEvent):
        apply(launched, RetryIntent(OURS, 3.0))  # execution 1 is still running
    applied = TurnFailure("EXECUTOR_FAILED", "", DeclaredEffect.APPLIED)
    with pytest.raises(IllegalRowEvent):
        apply(launched, EndExecution(OURS, 3.0, applied))
    with pytest.raises(IllegalRowEvent):
        apply(launched, EndExecution(OURS, 3.0, TurnFailure("EXECUTOR_FAILED")))
    ended = apply(launched, EndExecution(OURS, 3.0, NONE_FAILURE))
    with pytest.raises(IllegalRowEvent):
        apply(ended, RetryIntent("c" * 32, 4.0))


@pytest.mark.rule("R15")
def test_policy_bounds_name_the_field() -> None:
    """R15: a policy out of bounds is named field by field; a sane one has no problem."""
    assert problems(2, 1.0, 30.0, 2.0) == []
    assert [f for f, _ in problems(11, None, None, 0)] == ["max_retries"]
    assert [f for f, _ in problems(1, -1.0, None, 0)] == ["initial_backoff"]
    assert [f for f, _ in problems(1, 5.0, 1.0, 0)] == ["max_backoff"]
    assert [f for f, _ in problems(1, None, None, 0.5)] == ["backoff_multiplier"]
