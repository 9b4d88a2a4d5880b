"""Heartbeats (R12) and declared effects in the pure job machine and settlement (R7).

Pure: events in, commands out, as tests/runner/unit/test_job_lifecycle.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from runner_svc.core.job_lifecycle import (
    ArmLimitTimer,
    ExecutorFinished,
    ExecutorStarted,
    JobState,
    LaunchChecked,
    LaunchIntentWritten,
    LimitTimerFired,
    Phase,
    StopExecutor,
    WriteSettlement,
    WriteStopReason,
    admitted,
)
from runner_svc.core.model import DeclaredEffect, Execution, RowState, StopReason
from runner_svc.core.settlement import ReportedOutcome, decide_settlement, validate_outcome
from tests.runner.unit.test_job_lifecycle import FAILURE, KNOWN, SUCCESS, feed, settlements
from tests.runner.unit.test_row_transitions import OURS, row

S = RowState


def beating(*, heartbeat: float, deadline: float | None = None) -> tuple[JobState, list[object]]:
    """A job with a heartbeat timeout whose executor started at t=100."""
    state, commands = feed(
        admitted(OURS, deadline=deadline, budget_seconds=None, heartbeat_seconds=heartbeat),
        LaunchChecked(row(S.ACCEPTED), now=99.0),
        LaunchIntentWritten(),
        ExecutorStarted(at=100.0),
    )
    assert state.phase is Phase.RUNNING
    return state, list(commands)


@pytest.mark.rule("R12")
def test_a_heartbeat_timeout_is_armed_from_the_start() -> None:
    """R12: the first heartbeat is due one timeout after the executor started."""
    state, commands = beating(heartbeat=1.5)
    assert commands[-1] == ArmLimitTimer(101.5) and state.limit_alarm == 101.5


@pytest.mark.rule("R12", "R6")
def test_each_heartbeat_moves_the_next_check_and_silence_stops_the_turn_timed_out() -> None:
    """R12: a heartbeat seen re-arms the check a timeout after it; past one with no
    heartbeat the runner records HEARTBEAT (R6) and stops the executor; the turn
    settles TIMED_OUT, HEARTBEAT_TIMEOUT, execution STARTED."""
    state, _ = beating(heartbeat=1.0)
    state, commands = feed(state, LimitTimerFired(now=101.0, last_heartbeat=100.7))
    assert commands == [ArmLimitTimer(101.7)]
    state, commands = feed(state, LimitTimerFired(now=101.7, last_heartbeat=100.7))
    assert commands == [WriteStopReason(StopReason.HEARTBEAT), StopExecutor()]
    assert state.stop_reason is StopReason.HEARTBEAT and state.limit_alarm is None
    _, commands = feed(state, ExecutorFinished(FAILURE, KNOWN))
    assert settlements(commands) == [(S.TIMED_OUT, "HEARTBEAT_TIMEOUT", Execution.STARTED)]


@pytest.mark.rule("R6")
def test_an_executor_that_finishes_after_a_heartbeat_stop_keeps_its_success() -> None:
    """R6: a success finished on its own; the heartbeat stop stopped nothing."""
    state, _ = beating(heartbeat=1.0)
    state, _ = feed(state, LimitTimerFired(now=101.0))
    _, commands = feed(state, ExecutorFinished(SUCCESS, KNOWN))
    assert settlements(commands) == [(S.SUCCEEDED, "", Execution.STARTED)]


@pytest.mark.rule("R6")
def test_the_deadline_wins_over_a_heartbeat_due_at_the_same_moment() -> None:
    """R6: when both have run out, the deadline (wall-clock truth) is the stop reason."""
    state, _ = beating(heartbeat=1.0, deadline=101.0)
    _, commands = feed(state, LimitTimerFired(now=101.0))
    assert commands == [WriteStopReason(StopReason.DEADLINE), StopExecutor()]


@pytest.mark.rule("R6")
def test_an_earlier_stop_reason_wins_over_a_later_heartbeat_lapse() -> None:
    """R6: a cancel recorded first stays the reason; the lapse asks the executor again."""
    state, _ = beating(heartbeat=1.0)
    state = replace(state, stop_reason=StopReason.CANCEL)
    state, commands = feed(state, LimitTimerFired(now=102.0))
    assert commands == [StopExecutor()] and state.stop_reason is StopReason.CANCEL


NO_EFFECT = ReportedOutcome(
    succeeded=False,
    error_reason="EXECUTOR_FAILED",
    error_message="429 from the provider",
    effect="NONE",
    retry_after=2.5,
)


@pytest.mark.rule("R7")
def test_a_declared_effect_and_its_retry_hint_are_kept_on_the_failure() -> None:
    """R7: the executor's declared effect (and a NONE's retry_after) is settled with
    the failure, so a retry policy can read it from the row."""
    decision = decide_settlement(None, NO_EFFECT, KNOWN)
    assert decision.state is S.FAILED and decision.error is not None
    assert decision.error.effect is DeclaredEffect.NONE and decision.error.retry_after == 2.5
    applied = ReportedOutcome(succeeded=False, error_reason="EXECUTOR_FAILED", effect="APPLIED")
    error = decide_settlement(None, applied, KNOWN).error
    assert error is not None and error.effect is DeclaredEffect.APPLIED
    undeclared = decide_settlement(None, FAILURE, KNOWN).error
    assert undeclared is not None and undeclared.effect is None


@pytest.mark.rule("R6", "R7")
def test_a_declared_effect_survives_a_stop() -> None:
    """R6, R7: a failure after a stop is the stop's outcome, with what the executor declared."""
    decision = decide_settlement(StopReason.CANCEL, NO_EFFECT, KNOWN)
    assert decision.state is S.CANCELLED and decision.error is not None
    assert decision.error.effect is DeclaredEffect.NONE


@pytest.mark.rule("R7")
def test_malformed_effects_are_result_invalid() -> None:
    """R7: an unknown effect, an effect on a success, or a retry hint without NONE is refused."""
    bad = [
        ReportedOutcome(succeeded=False, effect="MAYBE"),
        ReportedOutcome(succeeded=True, effect="NONE"),
        ReportedOutcome(succeeded=False, effect="APPLIED", retry_after=1.0),
        ReportedOutcome(succeeded=False, effect="NONE", retry_after=-1.0),
        ReportedOutcome(succeeded=False, effect="NONE", retry_after="soon"),
    ]
    for outcome in bad:
        assert validate_outcome(outcome, KNOWN) is not None, outcome
        decision = decide_settlement(None, outcome, KNOWN)
        assert decision.error is not None and decision.error.reason == "RESULT_INVALID"


@pytest.mark.rule("R7")
def test_settlement_commands_carry_the_effect_to_the_row_write() -> None:
    """R7: the WriteSettlement the machine asks for holds the declared effect."""
    state, _ = beating(heartbeat=5.0)
    _, commands = feed(state, ExecutorFinished(NO_EFFECT, KNOWN))
    (write,) = [c for c in commands if isinstance(c, WriteSettlement)]
    assert write.decision.error is not None
    assert write.decision.error.effect is DeclaredEffect.NONE
