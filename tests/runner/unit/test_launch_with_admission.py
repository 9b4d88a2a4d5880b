"""A turn that launches at once is admitted with its launch intent (R3, R4, C14; issue 27).

Pure: the row transitions (one write is the two writes it replaces) and the
job machine from READY (no launch check, no intent of its own; a stop before
the start settles NOT_STARTED and starts nothing).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from runner_svc.core.job_lifecycle import (
    CancelRequested,
    DrainStarted,
    ExecutorStarted,
    FreeSlot,
    JobState,
    LaunchChecked,
    LaunchIntentWritten,
    NoteNotLaunched,
    Phase,
    RecordProcessGroup,
    SettlementWriteFailed,
    SettlementWritten,
    StartDue,
    StartExecutor,
    WriteConfirmStart,
    WriteLaunchIntent,
    WriteStopReason,
    admitted,
    step,
)
from runner_svc.core.model import Execution, RowState, SlotKind, StopReason
from runner_svc.core.transitions import Admit, LaunchIntent, Settle, TakeOver, apply
from tests.runner.unit.test_job_lifecycle import feed, settlements
from tests.runner.unit.test_row_transitions import OLD, OURS, row

S = RowState


def ready(*, deadline: float | None = None, draining: bool = False) -> JobState:
    return admitted(
        OURS, deadline=deadline, budget_seconds=None, draining=draining, with_intent=True
    )


# --- the row: one write, exactly what the two would leave ---------------------------------


@pytest.mark.rule("R3")
def test_an_admission_with_its_intent_leaves_the_row_the_two_writes_would() -> None:
    """R3: Admit with its intent is Admit then LaunchIntent, in one write: LAUNCHING,
    execution UNKNOWN, execution record 1 launched at the admission."""
    alone = Admit("op", OURS, SlotKind.WRITABLE, "d", 1, 1, 5.0, 77)
    joint = apply(None, replace(alone, with_intent=True), "op")
    assert joint == apply(apply(None, alone, "op"), LaunchIntent(OURS, 5.0))
    assert (joint.state, joint.execution) == (S.LAUNCHING, Execution.UNKNOWN)
    assert [(e.number, e.launched_at) for e in joint.executions] == [(1, 5.0)]


@pytest.mark.rule("R3")
def test_a_take_over_with_its_intent_leaves_the_row_the_two_writes_would() -> None:
    """§6, R3: a take-over of a row its process's shutdown stopped clears the stop and
    launches, in one write, exactly as TakeOver then LaunchIntent."""
    old = row(S.ACCEPTED, incarnation=OLD, stop_reason=StopReason.SHUTDOWN)
    alone = TakeOver(OURS, 2, 4, 6.0, 88)
    joint = apply(old, replace(alone, with_intent=True))
    assert joint == apply(apply(old, alone), LaunchIntent(OURS, 6.0))
    assert joint.state is S.LAUNCHING and joint.stop_reason is None


@pytest.mark.rule("C14")
def test_a_row_launched_by_its_admission_may_settle_not_started_by_its_own_incarnation() -> None:
    """C14: the incarnation that wrote the intent and started nothing settles the row
    with the stop, NOT_STARTED; the open execution record says NOT_STARTED too."""
    launched = apply(None, Admit("op", OURS, SlotKind.WRITABLE, "d", 1, 1, 5.0, with_intent=True))
    settled = apply(launched, Settle(OURS, S.CANCELLED, Execution.NOT_STARTED, 6.0))
    assert (settled.state, settled.execution) == (S.CANCELLED, Execution.NOT_STARTED)
    assert settled.executions[0].execution is Execution.NOT_STARTED


# --- the job: READY --------------------------------------------------------------------


@pytest.mark.rule("R3", "R4")
def test_a_job_admitted_with_its_intent_starts_with_no_check_and_no_write() -> None:
    """R3/R4: READY, execution 1; its start is due at once: StartExecutor, nothing else."""
    state = ready()
    assert state.phase is Phase.READY and state.execution_number == 1 and state.slot_held
    starting, commands = step(state, StartDue(now=1.0))
    assert commands == (StartExecutor(),) and starting.phase is Phase.STARTING
    _, commands = step(starting, ExecutorStarted(at=2.0))
    assert commands == (RecordProcessGroup(2.0), WriteConfirmStart(2.0))


@pytest.mark.rule("R3")
def test_a_ready_job_answers_no_launch_check_and_no_intent() -> None:
    """R3: the intent is the admission's; a launch check or an intent answer, however
    misplaced, writes and starts nothing, and a start comes only with StartDue."""
    state = ready()
    for event in (
        LaunchChecked(row(S.LAUNCHING), now=1.0),
        LaunchChecked(row(S.ACCEPTED), now=1.0),
        LaunchIntentWritten(),
        ExecutorStarted(at=1.0),
    ):
        after, commands = step(state, event)
        assert commands == () and after == state
    assert step(admitted(OURS, deadline=None, budget_seconds=None), StartDue(now=1.0))[1] == ()


@pytest.mark.rule("C14", "R6")
def test_a_cancel_before_the_start_settles_not_started_and_nothing_starts() -> None:
    """C14/R6: the Cancel settles the READY job at once, NOT_STARTED; the slot goes back
    once the settlement is durable, and the start that comes after does nothing."""
    state, commands = feed(ready(), CancelRequested(row(S.LAUNCHING)))
    assert settlements(commands) == [(S.CANCELLED, "CANCELLED", Execution.NOT_STARTED)]
    state, commands = feed(state, SettlementWritten())
    assert commands == [FreeSlot()] and state.phase is Phase.SETTLED
    _, commands = feed(state, StartDue(now=2.0))
    assert all(isinstance(c, NoteNotLaunched) for c in commands)


@pytest.mark.rule("R7")
def test_a_cancel_settlement_that_failed_is_written_again_at_the_start() -> None:
    """R7: the slot stays held; the start finds the stop and settles again, starting nothing."""
    state, commands = feed(ready(), CancelRequested(row(S.LAUNCHING)), SettlementWriteFailed())
    assert FreeSlot() not in commands and state.phase is Phase.READY
    _, commands = feed(state, StartDue(now=2.0))
    assert settlements(commands) == [(S.CANCELLED, "CANCELLED", Execution.NOT_STARTED)]
    assert StartExecutor() not in commands


@pytest.mark.rule("R8")
def test_a_drain_before_the_start_records_shutdown_and_nothing_starts() -> None:
    """R8: SHUTDOWN is recorded on the launched row; the start settles it NOT_STARTED."""
    state, commands = feed(ready(), DrainStarted())
    assert commands == [WriteStopReason(StopReason.SHUTDOWN)]
    _, commands = feed(state, StartDue(now=1.0))
    assert settlements(commands) == [(S.CANCELLED, "SHUTDOWN", Execution.NOT_STARTED)]
    assert StartExecutor() not in commands


@pytest.mark.rule("R8")
def test_a_job_admitted_with_its_intent_while_draining_never_starts() -> None:
    """R8: shutdown began while its row was written: it settles CANCELLED, SHUTDOWN."""
    _, commands = feed(ready(draining=True), StartDue(now=1.0))
    assert settlements(commands) == [(S.CANCELLED, "SHUTDOWN", Execution.NOT_STARTED)]
    assert StartExecutor() not in commands


@pytest.mark.rule("R6")
def test_a_deadline_passed_before_the_start_settles_timed_out_not_started() -> None:
    """R6: the deadline came between the admission and the start: nothing starts."""
    _, commands = feed(ready(deadline=10.0), StartDue(now=10.0))
    assert settlements(commands) == [(S.TIMED_OUT, "DEADLINE_EXCEEDED", Execution.NOT_STARTED)]
    assert not any(isinstance(c, StartExecutor | WriteLaunchIntent) for c in commands)
