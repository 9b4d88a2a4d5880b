"""The job lifecycle machine at random (R3, R5-R8, C14).

First as the shell really drives it: a store that applies the row transition
table (with the start confirmation queued behind its writer, taken up or
withdrawn as drawn), an executor, Cancels, limit timers and the drain, every
outcome drawn, with the rules checked against what the store holds. Then with any events at
all, in any order: misplaced answers must change nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    WithdrawConfirmStart,
    WriteConfirmStart,
    WriteLaunchIntent,
    WriteSettlement,
    WriteStopReason,
    admitted,
    step,
)
from runner_svc.core.model import Execution, OperationRow, RowState, SlotKind, StopReason
from runner_svc.core.transitions import (
    Admit,
    ConfirmStart,
    IllegalRowEvent,
    LaunchIntent,
    RecordStopReason,
    RowEvent,
    Settle,
    apply,
)
from tests.runner.unit.test_job_lifecycle import FAILURE, INVALID, KNOWN, SUCCESS
from tests.runner.unit.test_row_transitions import OLD, OURS, row

S = RowState


def _applied(stored: OperationRow | None, change: RowEvent) -> OperationRow | None:
    try:
        return apply(stored, change, "op")
    except IllegalRowEvent:
        return None


_MOSTLY_TRUE = st.sampled_from([True, True, True, True, False])


@dataclass
class World:
    """A shell that behaves as runner_svc.jobs does, every outcome drawn. Its store
    applies the real row transition table, so it holds what would be durable."""

    draw: Callable[[st.SearchStrategy[Any]], Any]
    state: JobState
    stored: OperationRow | None
    now: float = 100.0
    task: str = "check"  # the job's own run: check, wait, settle, over
    settle_commands: tuple[Command, ...] = ()
    executor_running: bool = False
    alarm: float | None = None
    starts: int = 0
    executor_started: bool = False
    start_unknown: bool = False  # the start failed oddly: it may have started
    drained: bool = False
    frees: int = 0
    stop_reason_writes: int = 0
    stopped_before_check: bool = False
    intent_durable: bool = False
    # The start confirmation queued behind the store's writer, not yet taken up.
    queued_confirmation: ConfirmStart | None = None
    confirmations: int = 0
    # R12: when the executor last heartbeat, as the shell records it.
    last_heartbeat: float | None = None

    def feed(self, event: JobEvent) -> None:
        before = self.state.stop_reason
        self.state, commands = step(self.state, event)
        assert before is None or self.state.stop_reason is before  # R6: first wins
        for command in commands:
            answer = self.perform(command)
            if answer is not None:
                self.feed(answer)

    def store_works(self) -> bool:
        return bool(self.draw(_MOSTLY_TRUE))

    def take_up_queued(self) -> None:
        """The store's writer takes up the queued confirmation (writes go in order)."""
        queued, self.queued_confirmation = self.queued_confirmation, None
        if queued is not None:
            self.confirmations += 1
            self.write(queued, must_be_legal=True)

    def write(self, change: RowEvent, *, must_be_legal: bool) -> bool:
        self.take_up_queued()
        after = _applied(self.stored, change)
        assert after is not None or not must_be_legal, f"illegal {change} on {self.stored}"
        if after is None or not self.store_works():
            return False
        self.stored = after
        return True

    def perform(self, command: Command) -> JobEvent | None:
        match command:
            case WriteLaunchIntent():
                if self.write(LaunchIntent(OURS), must_be_legal=True):
                    self.intent_durable = True
                    return LaunchIntentWritten()
                return LaunchIntentFailed()
            case StartExecutor():
                # R3: an executor starts only on a durable launch intent of ours.
                assert self.stored is not None and self.stored.state is S.LAUNCHING
                assert self.stored.incarnation_id == OURS
                self.starts += 1
                how = self.draw(st.sampled_from(["started"] * 4 + ["finished", "refused", "odd"]))
                if how == "finished":  # its outcome in hand as the start returned
                    self.executor_started = True
                    outcome = self.draw(st.sampled_from([SUCCESS, FAILURE, INVALID]))
                    return ExecutorStarted(self.now, finished=ExecutorFinished(outcome, KNOWN))
                if how == "started":
                    self.executor_running = self.executor_started = True
                    return ExecutorStarted(at=self.now)
                self.start_unknown = how == "odd"
                return ExecutorStartFailed("x", may_have_started=self.start_unknown)
            case WriteConfirmStart():
                assert self.queued_confirmation is None and self.confirmations == 0
                self.queued_confirmation = ConfirmStart(OURS, command.started_at)
            case WithdrawConfirmStart():
                if self.draw(st.booleans()):
                    self.take_up_queued()  # taken up already: it lands first
                self.queued_confirmation = None
            case WriteStopReason():
                self.stop_reason_writes += 1
                self.write(RecordStopReason(command.reason), must_be_legal=False)
            case StopExecutor():
                assert self.executor_started  # never asked before it started
            case ArmLimitTimer():
                self.alarm = command.at
            case WriteSettlement():
                # C14: the execution the settlement claims is the truth.
                truth = {
                    Execution.NOT_STARTED: not (self.executor_started or self.start_unknown),
                    Execution.STARTED: self.executor_started,
                    Execution.UNKNOWN: self.start_unknown,
                }
                assert truth[command.execution]
                # R3: a settlement that says STARTED records when.
                assert (command.started_at is not None) == (command.execution is Execution.STARTED)
                decision = command.decision
                settle = Settle(
                    OURS,
                    decision.state,
                    command.execution,
                    self.now,
                    result=decision.result,
                    error=decision.error,
                    started_at=command.started_at,
                )
                saved = self.write(settle, must_be_legal=True)
                return SettlementWritten() if saved else SettlementWriteFailed()
            case FreeSlot():
                self.frees += 1
                assert self.frees == 1  # the slot goes back once
                # R6/R7: once a launch intent is durable, only a durable settlement frees it.
                assert not self.intent_durable or (self.stored is not None and self.stored.settled)
            case NoteNotLaunched() | RecordProcessGroup():
                pass
        return None

    def actions(self) -> list[str]:
        """What may happen next; the job's own progress is drawn most often."""
        found = ["clock", "clock"]
        if self.task != "over":
            # A running executor finishes less eagerly: stops and timers get their turn.
            found += ["task"] * (3 if self.task == "wait" else 8) + ["crash"]
        if self.task == "wait" and self.alarm is not None:
            found += ["timer"] * 4
        if self.task == "wait":
            found.append("heartbeat")
        if self.queued_confirmation is not None:
            found += ["writer"] * 2  # the store's writer gets to it
        live = self.state.phase not in (Phase.SETTLED, Phase.RELEASED)
        if live and self.stored is not None and not self.stored.settled:
            found += ["cancel"] * 2  # the service passes a Cancel to a job it still has
        if live and not self.drained:
            found.append("drain")
        if self.drained and self.task != "over":
            found.append("drain deadline")  # only jobs still running are asked
        return found

    def act(self, action: str) -> None:
        if action in ("cancel", "drain") and self.task == "check":
            self.stopped_before_check = True
        if action == "clock":
            self.now += self.draw(st.sampled_from([0.1, 1.0, 5.0]))
        elif action == "cancel":
            assert self.stored is not None
            self.feed(CancelRequested(self.stored))
        elif action == "drain":
            self.drained = True
            self.feed(DrainStarted())
        elif action == "drain deadline":
            self.feed(DrainDeadlinePassed())
        elif action == "writer":
            self.take_up_queued()
        elif action == "crash":
            self.feed(JobCrashed())
            self.task = "over"
        elif action == "timer":
            assert self.alarm is not None
            self.now = max(self.now, self.alarm - self.draw(st.sampled_from([0.0, 0.2])))
            self.alarm = None
            self.feed(LimitTimerFired(now=self.now, last_heartbeat=self.last_heartbeat))
        elif action == "heartbeat":
            self.last_heartbeat = self.now
        else:
            self.advance_task()

    def advance_task(self) -> None:
        if self.task == "check" and self.state.phase is Phase.READY:
            # Admitted with its intent (issue 27): no read, the start is due.
            self.feed(StartDue(now=self.now))
            self.task = "wait" if self.executor_running else "over"
        elif self.task == "check":
            read = self.store_works()
            self.feed(LaunchChecked(self.stored, now=self.now) if read else LaunchCheckFailed())
            self.task = "wait" if self.executor_running else "over"
        elif self.task == "wait":
            self.executor_running, self.alarm = False, None  # the watchdog ends with the wait
            outcome = self.draw(st.sampled_from([SUCCESS, FAILURE, INVALID]))
            self.state, self.settle_commands = step(self.state, ExecutorFinished(outcome, KNOWN))
            self.task = "settle"
        else:  # settle: the decision made without the lock is written under it
            commands, self.settle_commands = self.settle_commands, ()
            self.task = "over"
            for command in commands:
                answer = self.perform(command)
                if answer is not None:
                    self.feed(answer)


@pytest.mark.rule("R3", "R6", "R7", "R5", "R8", "R12")
@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    found=st.sampled_from(["ours", "ours", "ours", "gone", "not ours"]),
    deadline=st.sampled_from([None, 100.5, 103.0]),
    budget=st.sampled_from([None, 0.5, 2.0]),
    heartbeat=st.sampled_from([None, None, 1.0]),
    draining=st.sampled_from([False, False, False, True]),
    with_intent=st.booleans(),
)
def test_random_runs_keep_the_runner_rules(
    data: st.DataObject,
    found: str,
    deadline: float | None,
    budget: float | None,
    heartbeat: float | None,
    draining: bool,
    with_intent: bool,
) -> None:
    """R3: no start without a durable intent (its own, or the admission's). R6/R7:
    the slot goes back exactly once when the job ends settled or released, and after
    a launch intent only once its settlement is durable. R5/R8: a stop before the
    launch check (or the start of a job admitted with its intent) means no start.
    R12: a heartbeat stop ends TIMED_OUT, STARTED."""
    stored = {"ours": row(S.ACCEPTED), "gone": None, "not ours": row(S.ACCEPTED, incarnation=OLD)}
    found_row = stored[found]
    if with_intent:
        # The admission wrote the row of ours with its intent (Admit with_intent).
        found_row = apply(None, Admit("op", OURS, SlotKind.WRITABLE, "d", 1, 3, 99.0, 0, True))
    state = admitted(
        OURS,
        deadline=deadline,
        budget_seconds=budget,
        heartbeat_seconds=heartbeat,
        draining=draining,
        with_intent=with_intent,
    )
    world = World(data.draw, state, found_row, stopped_before_check=draining)
    world.intent_durable = with_intent
    for _ in range(40):
        world.act(data.draw(st.sampled_from(world.actions())))
        if world.task == "over" and data.draw(st.booleans()):
            break
    while world.task != "over":
        world.act("task")
    world.take_up_queued()  # whatever is still queued is written in the end
    assert world.starts <= 1 and world.stop_reason_writes <= 1 and world.confirmations <= 1
    if world.stopped_before_check:
        assert world.starts == 0
    final = world.state
    assert final.phase in (Phase.SETTLED, Phase.RELEASED, Phase.HELD)
    assert world.frees == (0 if final.phase is Phase.HELD else 1)
    if final.phase is Phase.HELD:
        assert final.result_not_saved  # a held slot always says why (R7)
    stored = world.stored
    if world.executor_started:
        # R3: what the store holds of a started turn never says it did not start:
        # the intent (UNKNOWN), the confirmation, or a settlement that records it.
        assert stored is not None and stored.state is not S.ACCEPTED
        assert stored.execution is not Execution.NOT_STARTED
    if stored is not None and stored.execution is Execution.STARTED:
        assert stored.started_at is not None
    if stored is not None and stored.settled and stored.stop_reason is StopReason.HEARTBEAT:
        assert (stored.state, stored.execution) == (S.TIMED_OUT, Execution.STARTED)
        assert heartbeat is not None


_ROWS = st.sampled_from(
    [
        row(S.ACCEPTED),
        row(S.LAUNCHING),
        row(S.RUNNING),
        row(S.CANCELLED),
        row(S.ACCEPTED, incarnation=OLD),
    ]
)
_TIMES = st.sampled_from([0.0, 100.0, 100.5, 101.0, 102.0, 1e9])
_EVENTS: st.SearchStrategy[JobEvent] = st.one_of(
    st.builds(LaunchChecked, st.one_of(st.none(), _ROWS), _TIMES),
    st.builds(StartDue, _TIMES),
    st.builds(ExecutorStarted, _TIMES),
    st.builds(
        ExecutorStarted,
        _TIMES,
        st.builds(ExecutorFinished, st.sampled_from([SUCCESS, FAILURE, INVALID]), st.just(KNOWN)),
    ),
    st.builds(ExecutorStartFailed, st.just("x"), st.booleans()),
    st.builds(LimitTimerFired, _TIMES),
    st.builds(ExecutorFinished, st.sampled_from([SUCCESS, FAILURE, INVALID]), st.just(KNOWN)),
    st.builds(CancelRequested, _ROWS),
    st.sampled_from(
        [
            LaunchCheckFailed(),
            LaunchIntentWritten(),
            LaunchIntentFailed(),
            SettlementWritten(),
            SettlementWriteFailed(),
            DrainStarted(),
            DrainDeadlinePassed(),
            JobCrashed(),
            JobAbandoned(),
        ]
    ),
)


@settings(max_examples=500, deadline=None)
@given(
    events=st.lists(_EVENTS, max_size=25),
    deadline=st.sampled_from([None, 101.0]),
    budget=st.sampled_from([None, 1.0]),
    with_intent=st.booleans(),
)
def test_no_event_sequence_starts_without_an_intent_or_frees_twice(
    events: list[JobEvent], deadline: float | None, budget: float | None, with_intent: bool
) -> None:
    """Misplaced answers change nothing: StartExecutor only answers a LaunchIntentWritten
    to an open WriteLaunchIntent, or the first StartDue of a job admitted with its
    intent; the slot goes back at most once, and once an intent was asked for (or
    written by the admission) only as the answer to a durable settlement."""
    state = admitted(OURS, deadline=deadline, budget_seconds=budget, with_intent=with_intent)
    intent_open = settlement_open = False
    intent_asked = start_due_open = with_intent
    frees = 0
    for event in events:
        before = state.stop_reason
        state, commands = step(state, event)
        assert before is None or state.stop_reason is before  # R6
        if isinstance(event, LaunchIntentWritten | LaunchIntentFailed):
            assert StartExecutor() not in commands or (
                intent_open and isinstance(event, LaunchIntentWritten)
            )
            intent_open = False
        elif isinstance(event, StartDue):
            assert StartExecutor() not in commands or start_due_open
            start_due_open = False
        else:
            assert StartExecutor() not in commands
        for command in commands:
            if isinstance(command, FreeSlot):
                frees += 1
                assert not intent_asked or (
                    settlement_open and isinstance(event, SettlementWritten)
                )
        if isinstance(event, SettlementWritten | SettlementWriteFailed):
            settlement_open = False
        intent_open |= WriteLaunchIntent() in commands
        intent_asked |= intent_open
        settlement_open |= any(isinstance(c, WriteSettlement) for c in commands)
    assert frees <= 1
