"""The job lifecycle machine (R3, R5-R8, C14): launch, limits, stops, settlement.

Pure: each test feeds events into ``step`` and reads the commands back.
test_job_lifecycle_properties.py drives the same machine at random.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from runner_svc.core.job_lifecycle import (
    ArmLimitTimer,
    CancelRequested,
    Command,
    DrainDeadlinePassed,
    DrainStarted,
    ExecutorFinished,
    ExecutorStarted,
    ExecutorStartFailed,
    FreeSlot,
    JobAbandoned,
    JobCrashed,
    JobEvent,
    JobState,
    LaunchChecked,
    LaunchCheckFailed,
    LaunchIntentFailed,
    LaunchIntentWritten,
    LimitTimerFired,
    NoteNotLaunched,
    Phase,
    RecordProcessGroup,
    SettlementWriteFailed,
    SettlementWritten,
    StartDue,
    StartExecutor,
    StopExecutor,
    WriteConfirmStart,
    WriteLaunchIntent,
    WriteSettlement,
    WriteStopReason,
    admitted,
    step,
)
from runner_svc.core.model import Execution, OperationRow, RowState, StopReason
from runner_svc.core.settlement import ReportedOutcome
from tests.runner.unit.test_row_transitions import OLD, OURS, row

S = RowState
KNOWN = frozenset({"EXECUTOR_FAILED", "CANCELLED"})
SUCCESS = ReportedOutcome(succeeded=True, output=b"ok")
FAILURE = ReportedOutcome(succeeded=False, error_reason="EXECUTOR_FAILED", error_message="boom")
INVALID = ReportedOutcome(succeeded="yes")


def job(*, deadline: float | None = None, budget: float | None = None) -> JobState:
    return admitted(OURS, deadline=deadline, budget_seconds=budget)


def feed(state: JobState, *events: JobEvent) -> tuple[JobState, list[Command]]:
    """Every command the events produce, in order."""
    commands: list[Command] = []
    for event in events:
        state, more = step(state, event)
        commands.extend(more)
    return state, commands


def running(*, deadline: float | None = None, budget: float | None = None) -> JobState:
    """A job whose executor started at t=100."""
    state, _ = feed(
        job(deadline=deadline, budget=budget),
        LaunchChecked(row(S.ACCEPTED), now=99.0),
        LaunchIntentWritten(),
        ExecutorStarted(at=100.0),
    )
    assert state.phase is Phase.RUNNING
    return state


def settlements(commands: list[Command]) -> list[tuple[RowState, str, Execution]]:
    return [
        (c.decision.state, c.decision.error.reason if c.decision.error else "", c.execution)
        for c in commands
        if isinstance(c, WriteSettlement)
    ]


# --- launch (R3) ---------------------------------------------------------------------


@pytest.mark.rule("R3")
def test_the_launch_check_asks_for_a_durable_intent_and_nothing_else() -> None:
    """R3: an ACCEPTED row of ours with no stop reason gets a launch intent, no start yet."""
    state, commands = feed(job(), LaunchChecked(row(S.ACCEPTED), now=1.0))
    assert commands == [WriteLaunchIntent()] and state.phase is Phase.LAUNCHING


@pytest.mark.rule("R3")
def test_the_executor_starts_only_once_the_intent_is_durable() -> None:
    """R3: StartExecutor answers LaunchIntentWritten; a failed intent starts nothing."""
    launching, _ = feed(job(), LaunchChecked(row(S.ACCEPTED), now=1.0))
    assert step(launching, LaunchIntentWritten())[1] == (StartExecutor(),)
    held, commands = step(launching, LaunchIntentFailed())
    assert commands == () and held.phase is Phase.HELD
    assert held.slot_held and held.result_not_saved  # R7: fail closed
    assert step(job(), LaunchIntentWritten())[1] == ()  # no open request: nothing


@pytest.mark.rule("R10", "R3")
def test_a_started_executor_is_recorded_confirmed_and_timed() -> None:
    """R10 then R3: the process group, the start confirmation, the first limit's alarm."""
    state, commands = feed(
        job(deadline=150.0, budget=2.0),
        LaunchChecked(row(S.ACCEPTED), now=99.0),
        LaunchIntentWritten(),
        ExecutorStarted(at=100.0),
    )
    assert commands[1:] == [
        StartExecutor(),
        RecordProcessGroup(100.0),
        WriteConfirmStart(100.0),
        ArmLimitTimer(102.0),
    ]
    assert state.started_at == 100.0 and state.limit_alarm == 102.0


def test_a_stop_that_came_while_starting_is_sent_once_the_executor_started() -> None:
    starting = replace(job(), phase=Phase.STARTING, stop_reason=StopReason.CANCEL)
    _, commands = step(starting, ExecutorStarted(at=5.0))
    assert commands == (RecordProcessGroup(5.0), WriteConfirmStart(5.0), StopExecutor())


@pytest.mark.rule("C14")
@pytest.mark.parametrize(
    ("may_have_started", "execution"),
    [(False, Execution.NOT_STARTED), (True, Execution.UNKNOWN)],
)
def test_a_failed_start_settles_failed_with_the_execution_it_can_prove(
    may_have_started: bool, execution: Execution
) -> None:
    """C14: only a typed refusal proves nothing started; anything else is UNKNOWN."""
    starting = replace(job(), phase=Phase.STARTING)
    _, commands = feed(starting, ExecutorStartFailed("no", may_have_started))
    assert settlements(commands) == [(S.FAILED, "EXECUTOR_UNAVAILABLE", execution)]


# --- stops before the launch (R5, R6, R8, C14) ---------------------------------------


def test_a_cancel_before_the_launch_settles_not_started_and_never_launches() -> None:
    state, commands = feed(job(), CancelRequested(row(S.ACCEPTED)))
    assert settlements(commands) == [(S.CANCELLED, "CANCELLED", Execution.NOT_STARTED)]
    state, commands = feed(state, SettlementWritten())
    assert commands == [FreeSlot()] and state.phase is Phase.SETTLED
    # The job's own launch check comes after: it launches nothing and frees nothing.
    _, commands = feed(state, LaunchChecked(row(S.CANCELLED), now=2.0))
    assert all(isinstance(c, NoteNotLaunched) for c in commands)


@pytest.mark.rule("R7")
def test_a_cancel_settlement_that_failed_is_written_again_by_the_launch_check() -> None:
    """R7: the slot stays held; the launch check settles it once the store works again."""
    state, commands = feed(job(), CancelRequested(row(S.ACCEPTED)), SettlementWriteFailed())
    assert FreeSlot() not in commands and state.phase is Phase.ADMITTED
    state, commands = feed(state, LaunchChecked(row(S.ACCEPTED), now=2.0))
    assert settlements(commands) == [(S.CANCELLED, "CANCELLED", Execution.NOT_STARTED)]
    assert WriteLaunchIntent() not in commands


def test_a_deadline_passed_before_the_launch_settles_timed_out_not_started() -> None:
    _, commands = feed(job(deadline=10.0), LaunchChecked(row(S.ACCEPTED), now=10.0))
    assert settlements(commands) == [(S.TIMED_OUT, "DEADLINE_EXCEEDED", Execution.NOT_STARTED)]
    assert not any(isinstance(c, WriteLaunchIntent | WriteStopReason) for c in commands)


@pytest.mark.rule("R8")
def test_a_job_admitted_while_draining_never_launches() -> None:
    """R8: shutdown began while its row was written: it settles CANCELLED, SHUTDOWN."""
    state = admitted(OURS, deadline=None, budget_seconds=None, draining=True)
    _, commands = feed(state, LaunchChecked(row(S.ACCEPTED), now=1.0))
    assert settlements(commands) == [(S.CANCELLED, "SHUTDOWN", Execution.NOT_STARTED)]


def test_a_drain_before_the_launch_records_shutdown_and_blocks_it() -> None:
    state, commands = feed(job(), DrainStarted())
    assert commands == [WriteStopReason(StopReason.SHUTDOWN)]
    stopped = row(S.ACCEPTED, stop_reason=StopReason.SHUTDOWN)
    _, commands = feed(state, LaunchChecked(stopped, now=1.0))
    assert settlements(commands) == [(S.CANCELLED, "SHUTDOWN", Execution.NOT_STARTED)]


@pytest.mark.parametrize("found", [None, row(S.ACCEPTED, incarnation=OLD), row(S.CANCELLED)])
def test_a_launch_blocked_with_no_stop_gives_the_slot_back_unsettled(
    found: OperationRow | None,
) -> None:
    """Nothing of ours launched (row gone, settled or not ours): nothing to settle."""
    state, commands = feed(job(), LaunchChecked(found, now=1.0))
    assert [type(c) for c in commands] == [NoteNotLaunched, FreeSlot]
    assert state.phase is Phase.RELEASED and not state.slot_held


def test_an_unsaved_launch_intent_can_still_be_settled_by_a_cancel() -> None:
    state, _ = feed(job(), LaunchChecked(row(S.ACCEPTED), now=1.0), LaunchIntentFailed())
    state, commands = feed(state, CancelRequested(row(S.ACCEPTED)), SettlementWritten())
    assert settlements(commands) == [(S.CANCELLED, "CANCELLED", Execution.NOT_STARTED)]
    assert commands[-1] == FreeSlot() and state.phase is Phase.SETTLED


# --- limits and stops while running (R6, R8) ----------------------------------------------


def test_a_budget_that_runs_out_stops_the_turn_timed_out() -> None:
    state = running(deadline=150.0, budget=2.0)
    state, commands = feed(state, LimitTimerFired(now=102.0))
    assert commands == [WriteStopReason(StopReason.BUDGET), StopExecutor()]
    _, commands = feed(state, ExecutorFinished(FAILURE, KNOWN))
    assert settlements(commands) == [(S.TIMED_OUT, "BUDGET_EXHAUSTED", Execution.STARTED)]


def test_a_deadline_that_passes_stops_the_turn_timed_out() -> None:
    state = running(deadline=101.0, budget=5.0)
    state, commands = feed(state, LimitTimerFired(now=101.0))
    assert commands == [WriteStopReason(StopReason.DEADLINE), StopExecutor()]
    _, commands = feed(state, ExecutorFinished(FAILURE, KNOWN))
    assert settlements(commands) == [(S.TIMED_OUT, "DEADLINE_EXCEEDED", Execution.STARTED)]


@pytest.mark.rule("R6")
def test_an_early_wakeup_rearms_for_the_limit_still_to_come_and_a_stop_disarms() -> None:
    """R6: a wake-up before any limit re-arms for the earliest one still to come
    (the budget here, not skipped for the deadline); once a limit stopped the
    turn, later wake-ups do nothing."""
    state = running(deadline=101.0, budget=0.5)
    state, commands = feed(state, LimitTimerFired(now=100.4))
    assert commands == [ArmLimitTimer(100.5)]
    state, commands = feed(state, LimitTimerFired(now=100.5), LimitTimerFired(now=200.0))
    assert commands == [WriteStopReason(StopReason.BUDGET), StopExecutor()]
    assert state.limit_alarm is None


@pytest.mark.rule("R6")
def test_the_first_stop_reason_wins_and_every_stop_asks_the_executor() -> None:
    """R6: cancel first, then the deadline: one reason written, two asks, CANCELLED."""
    state = running(deadline=101.0)
    state, commands = feed(state, CancelRequested(row(S.RUNNING)), LimitTimerFired(now=101.0))
    assert commands == [WriteStopReason(StopReason.CANCEL), StopExecutor(), StopExecutor()]
    assert state.stop_reason is StopReason.CANCEL
    _, commands = feed(state, ExecutorFinished(FAILURE, KNOWN))
    assert settlements(commands) == [(S.CANCELLED, "CANCELLED", Execution.STARTED)]


@pytest.mark.rule("C11", "R6")
def test_a_turn_that_succeeds_after_a_stop_settles_succeeded() -> None:
    """C11/R6: the cancel lost the race; the turn finished on its own."""
    state, _ = feed(running(), CancelRequested(row(S.RUNNING)))
    _, commands = feed(state, ExecutorFinished(SUCCESS, KNOWN))
    assert settlements(commands) == [(S.SUCCEEDED, "", Execution.STARTED)]


def test_an_invalid_outcome_settles_failed_result_invalid() -> None:
    _, commands = feed(running(), ExecutorFinished(INVALID, KNOWN))
    assert settlements(commands) == [(S.FAILED, "RESULT_INVALID", Execution.STARTED)]


@pytest.mark.rule("R8")
def test_a_drain_lets_the_executor_run_until_its_deadline() -> None:
    """R8: SHUTDOWN is recorded at once; the executor is asked to stop only later."""
    state, commands = feed(running(), DrainStarted())
    assert commands == [WriteStopReason(StopReason.SHUTDOWN)]
    assert feed(state, DrainDeadlinePassed())[1] == [StopExecutor()]
    assert feed(job(), DrainDeadlinePassed())[1] == []  # nothing started: nothing to ask


def test_a_cancel_for_another_incarnations_row_does_nothing() -> None:
    assert feed(running(), CancelRequested(row(S.RUNNING, incarnation=OLD)))[1] == []


# --- settlement (R6, R7) --------------------------------------------------------------------


def test_the_slot_is_freed_only_after_a_durable_settlement() -> None:
    state, commands = feed(running(), ExecutorFinished(SUCCESS, KNOWN))
    assert FreeSlot() not in commands and state.slot_held
    held, commands = feed(state, SettlementWriteFailed())
    assert commands == [] and held.phase is Phase.HELD and held.result_not_saved
    settled, commands = feed(state, SettlementWritten())
    assert commands == [FreeSlot()] and not settled.slot_held


def test_a_crashed_job_holds_its_slot_and_is_not_asked_to_stop_again() -> None:
    """Fail closed; its run is over, so there is no executor it still waits for."""
    state, commands = feed(running(), JobCrashed(), DrainDeadlinePassed())
    assert commands == [] and state.phase is Phase.HELD and state.result_not_saved
    assert feed(state, CancelRequested(row(S.RUNNING)))[1] == [WriteStopReason(StopReason.CANCEL)]


def test_a_settled_job_ignores_everything_after() -> None:
    state, _ = feed(running(), ExecutorFinished(SUCCESS, KNOWN), SettlementWritten())
    for event in _ANY_EVENT_EXAMPLES:
        after, commands = step(state, event)
        assert after.phase is Phase.SETTLED
        assert all(isinstance(c, NoteNotLaunched) for c in commands)


_ANY_EVENT_EXAMPLES: tuple[JobEvent, ...] = (
    LaunchChecked(row(S.ACCEPTED), now=1.0),
    LaunchCheckFailed(),
    StartDue(now=1.0),
    LaunchIntentWritten(),
    LaunchIntentFailed(),
    ExecutorStarted(at=1.0),
    ExecutorStarted(at=1.0, finished=ExecutorFinished(SUCCESS, KNOWN)),
    ExecutorStartFailed("x", may_have_started=True),
    LimitTimerFired(now=1e9),
    ExecutorFinished(SUCCESS, KNOWN),
    SettlementWritten(),
    SettlementWriteFailed(),
    CancelRequested(row(S.ACCEPTED)),
    DrainStarted(),
    DrainDeadlinePassed(),
    JobCrashed(),
    JobAbandoned(),
)
