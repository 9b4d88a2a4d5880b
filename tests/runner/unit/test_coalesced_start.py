"""R3's start confirmation folded into the settlement when the outcome comes first.

Pure: the machine's decision (core/job_lifecycle.py) and the row change it
leads to (core/transitions.py). The live counterpart is
tests/runner/races/test_coalesced_start_live.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from runner_svc.core.job_lifecycle import (
    CancelRequested,
    ExecutorFinished,
    ExecutorStarted,
    FreeSlot,
    JobState,
    LaunchChecked,
    LaunchIntentWritten,
    Phase,
    RecordProcessGroup,
    SettlementWriteFailed,
    SettlementWritten,
    StopExecutor,
    WithdrawConfirmStart,
    WriteConfirmStart,
    WriteSettlement,
    WriteStopReason,
)
from runner_svc.core.model import Execution, RowState, StopReason, TurnOutput
from runner_svc.core.settlement import ReportedOutcome, SettlementDecision
from runner_svc.core.transitions import IllegalRowEvent, Settle, apply
from tests.runner.unit.test_job_lifecycle import (
    FAILURE,
    KNOWN,
    SUCCESS,
    feed,
    job,
    running,
    settlements,
)
from tests.runner.unit.test_row_transitions import OURS, row

S = RowState
OK = TurnOutput(b"ok")


def starting(stop_reason: StopReason | None = None) -> JobState:
    """A job whose launch intent is durable and whose executor is being started."""
    state, _ = feed(job(), LaunchChecked(row(S.ACCEPTED), now=99.0), LaunchIntentWritten())
    assert state.phase is Phase.STARTING
    return replace(state, stop_reason=stop_reason)


@pytest.mark.rule("R3", "R7")
def test_an_outcome_in_hand_at_the_start_is_settled_with_no_confirmation() -> None:
    """R3/R7: no confirmation of its own; one settlement, STARTED, with the start time."""
    state, commands = feed(
        job(deadline=150.0, budget=2.0),
        LaunchChecked(row(S.ACCEPTED), now=99.0),
        LaunchIntentWritten(),
        ExecutorStarted(at=100.0, finished=ExecutorFinished(SUCCESS, KNOWN)),
    )
    assert not any(isinstance(c, WriteConfirmStart | WithdrawConfirmStart) for c in commands)
    assert commands[-2:] == [
        RecordProcessGroup(100.0),
        WriteSettlement(SettlementDecision(S.SUCCEEDED, result=OK), Execution.STARTED, 100.0),
    ]
    assert state.phase is Phase.SETTLING and state.slot_held  # R6: freed once durable
    settled, commands = feed(state, SettlementWritten())
    assert commands == [FreeSlot()] and settled.phase is Phase.SETTLED


@pytest.mark.rule("R7")
def test_a_failed_settlement_of_a_turn_that_finished_at_its_start_holds_the_slot() -> None:
    """R7: nothing reported, the slot held; the row keeps its intent (UNKNOWN, true)."""
    state, commands = feed(
        starting(),
        ExecutorStarted(at=100.0, finished=ExecutorFinished(SUCCESS, KNOWN)),
        SettlementWriteFailed(),
    )
    assert FreeSlot() not in commands
    assert state.phase is Phase.HELD and state.result_not_saved


@pytest.mark.rule("R6")
@pytest.mark.parametrize(
    ("outcome", "expected"),
    [(SUCCESS, (S.SUCCEEDED, "")), (FAILURE, (S.CANCELLED, "CANCELLED"))],
)
def test_a_stop_recorded_before_the_start_decides_as_ever(
    outcome: ReportedOutcome, expected: tuple[RowState, str]
) -> None:
    """R6: a turn that succeeded finished on its own; a failure after the stop is the stop's."""
    _, commands = feed(
        starting(StopReason.CANCEL),
        ExecutorStarted(at=100.0, finished=ExecutorFinished(outcome, KNOWN)),
    )
    assert settlements(commands) == [(*expected, Execution.STARTED)]
    assert StopExecutor() not in commands  # it has finished: nothing to stop


@pytest.mark.rule("R3")
def test_a_running_turn_queues_its_confirmation_and_an_outcome_withdraws_it() -> None:
    """R3: confirmation queued at the start; the outcome withdraws it before settling."""
    state = running()
    assert state.confirmation_queued
    settling, commands = feed(state, ExecutorFinished(SUCCESS, KNOWN))
    assert commands == [
        WithdrawConfirmStart(),
        WriteSettlement(SettlementDecision(S.SUCCEEDED, result=OK), Execution.STARTED, 100.0),
    ]
    assert not settling.confirmation_queued


@pytest.mark.rule("R6")
def test_a_stop_while_the_confirmation_is_queued_is_kept_and_wins() -> None:
    """R6: the cancel is recorded (behind the confirmation, in write order) and settles it."""
    state, commands = feed(running(), CancelRequested(row(S.LAUNCHING)))
    assert commands == [WriteStopReason(StopReason.CANCEL), StopExecutor()]
    _, commands = feed(state, ExecutorFinished(FAILURE, KNOWN))
    assert isinstance(commands[0], WithdrawConfirmStart)
    assert settlements(commands) == [(S.CANCELLED, "CANCELLED", Execution.STARTED)]


# --- the row change ---------------------------------------------------------------------


@pytest.mark.rule("R3")
def test_a_settlement_straight_from_the_intent_records_the_start() -> None:
    """R3: the settled row implies the start: STARTED, with its time."""
    done = apply(
        row(S.LAUNCHING),
        Settle(OURS, S.SUCCEEDED, Execution.STARTED, 9.0, result=OK, started_at=8.0),
    )
    assert (done.state, done.execution, done.started_at) == (S.SUCCEEDED, Execution.STARTED, 8.0)


def test_a_confirmed_start_keeps_its_own_time() -> None:
    confirmed = row(S.RUNNING, started_at=7.0)
    done = apply(
        confirmed, Settle(OURS, S.SUCCEEDED, Execution.STARTED, 9.0, result=OK, started_at=8.0)
    )
    assert done.started_at == 7.0


@pytest.mark.parametrize(
    ("source", "execution", "state"),
    [
        (S.ACCEPTED, Execution.NOT_STARTED, S.CANCELLED),
        (S.LAUNCHING, Execution.UNKNOWN, S.FAILED),
        (S.LAUNCHING, Execution.NOT_STARTED, S.FAILED),
    ],
)
def test_only_a_start_has_a_start_time(
    source: RowState, execution: Execution, state: RowState
) -> None:
    with pytest.raises(IllegalRowEvent):
        apply(row(source), Settle(OURS, state, execution, 9.0, started_at=8.0))
