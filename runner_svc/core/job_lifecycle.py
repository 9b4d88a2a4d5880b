"""The life of one admitted turn as a pure state machine (R3, R6, R7, R8).

``step(state, event)`` returns the job's next state and the commands the shell
(``runner_svc.jobs``) performs, in order. Events say what happened: the row
read for the launch check, a durable write that landed or failed, the
executor's start and outcome, a limit timer, a Cancel, the drain. Time comes
in on events; nothing here awaits, reads a clock or touches the store.

A job is made by a successful admission, which reserved its slot::

    ADMITTED --launch check passes--> LAUNCHING --intent durable--> STARTING
    READY (admitted with its intent) --start due------------------> STARTING
      --executor started--> RUNNING --outcome in--> SETTLING --durable--> SETTLED

A turn that launches at once is admitted with its launch intent in the same
commit (issue 27) and starts READY; only one admitted alone (its deadline
had passed) goes through the launch check and an intent of its own
(core/job_launch.py has both ways and why a stopped READY job settles
NOT_STARTED).

A retry (R15) loops back inside the same job and the same slot: an execution
that failed with declared effect NONE, nothing having stopped the turn, with
retries left and time before the deadline and budget, is ended durably
without settling (``WriteExecutionEnd``), the job waits (``BACKOFF``,
``ArmRetryTimer``), and the next execution gets its own launch intent
(``WriteLaunchIntent(number=n)``) and start. A stop during the wait settles
the turn with that stop and no further execution. Anything else is final
(core/retries.py decides; PROTOCOL.md R15).

Side exits: a launch check that is blocked settles the never-launched row when
a stop reason blocked it (a READY job stopped before its start settles so too),
or gives the slot back unsettled when nothing of ours can launch (RELEASED,
never after an intent); a write that fails leaves the slot held, marked
result-not-saved, until restart (HELD, R7). The slot is given back
(``FreeSlot``) at most once, and once a launch intent exists only after the
settlement is durable (R6).

Three commands are requests (``WriteLaunchIntent``, ``StartExecutor``,
``WriteSettlement``): the shell answers each with one event before it performs
the next command. An answer that matches no open request changes nothing, so
no event, however misplaced, can start an executor or free a slot. The one
start that answers no request is ``StartDue``'s, and only in READY, which only
an admission that wrote the intent makes (``admitted(with_intent=True)``).

The start confirmation (R3's second step) is not a request: it is queued
behind the store's single writer and the job goes on to wait for the outcome.
A turn whose outcome is in before the confirmation is written needs no
confirmation of its own: if the outcome was in hand as the start returned,
none is queued; if it comes while the confirmation is still queued, the
confirmation is withdrawn (``WithdrawConfirmStart``: the shell drops it unless
the writer already took it up). Either way the settlement, written once, says
``STARTED`` and carries the start time, so the row goes from the intent
straight to settled: a crash before that leaves the intent alone (``UNKNOWN``,
never ``NOT_STARTED``), and after it the settled row implies the start. A turn
still running gets its confirmation as before (issue 10).

Events and commands are defined in core/job_events.py, the job's state in
core/job_state.py, and all of them are re-exported here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import assert_never

from runner_svc.core.job_events import (
    ArmLimitTimer,
    ArmRetryTimer,
    CancelRequested,
    Command,
    DrainDeadlinePassed,
    DrainStarted,
    ExecutionEndFailed,
    ExecutionEndWritten,
    ExecutorFinished,
    ExecutorStarted,
    ExecutorStartFailed,
    FreeSlot,
    JobAbandoned,
    JobCrashed,
    JobEvent,
    LaunchChecked,
    LaunchCheckFailed,
    LaunchIntentFailed,
    LaunchIntentWritten,
    LimitTimerFired,
    NoteNotLaunched,
    RecordProcessGroup,
    RetryTimerFired,
    SettlementWriteFailed,
    SettlementWritten,
    StartDue,
    StartExecutor,
    StopExecutor,
    WithdrawConfirmStart,
    WriteConfirmStart,
    WriteExecutionEnd,
    WriteLaunchIntent,
    WriteSettlement,
    WriteStopReason,
)
from runner_svc.core.job_launch import launch_checked, start_due
from runner_svc.core.job_state import FINAL_PHASES, JobState, Phase, Step, admitted, settle
from runner_svc.core.model import Execution, RowState, StopReason, TurnFailure
from runner_svc.core.retries import retry_after_failure, stopped_in_backoff
from runner_svc.core.settlement import (
    SettlementDecision,
    decide_settlement,
    due_stop_reason,
    first_stop_reason,
    heartbeat_due,
    unlaunched_settlement,
)

__all__ = [
    "FINAL_PHASES",
    "ArmLimitTimer",
    "ArmRetryTimer",
    "CancelRequested",
    "Command",
    "DrainDeadlinePassed",
    "DrainStarted",
    "ExecutionEndFailed",
    "ExecutionEndWritten",
    "ExecutorFinished",
    "ExecutorStartFailed",
    "ExecutorStarted",
    "FreeSlot",
    "JobAbandoned",
    "JobCrashed",
    "JobEvent",
    "JobState",
    "LaunchCheckFailed",
    "LaunchChecked",
    "LaunchIntentFailed",
    "LaunchIntentWritten",
    "LimitTimerFired",
    "NoteNotLaunched",
    "Phase",
    "RecordProcessGroup",
    "RetryTimerFired",
    "SettlementWriteFailed",
    "SettlementWritten",
    "StartDue",
    "StartExecutor",
    "Step",
    "StopExecutor",
    "WithdrawConfirmStart",
    "WriteConfirmStart",
    "WriteExecutionEnd",
    "WriteLaunchIntent",
    "WriteSettlement",
    "WriteStopReason",
    "admitted",
    "step",
]


def step(state: JobState, event: JobEvent) -> Step:
    """The job after ``event``, and what the shell must do, in order."""
    match event:
        case LaunchChecked():
            return launch_checked(state, event)
        case StartDue():
            return start_due(state, event)
        case LaunchCheckFailed():
            if state.phase is not Phase.ADMITTED:
                return state, ()
            return replace(state, phase=Phase.HELD, result_not_saved=True), ()
        case LaunchIntentWritten():
            if state.phase is not Phase.LAUNCHING:
                return state, ()
            return replace(state, phase=Phase.STARTING, retry_at=None), (StartExecutor(),)
        case LaunchIntentFailed():
            if state.phase is not Phase.LAUNCHING:
                return state, ()
            # Not launched; the slot stays held (the row may still say ACCEPTED:
            # a Cancel can settle it then).
            return replace(state, phase=Phase.HELD, result_not_saved=True), ()
        case ExecutorStarted():
            return _executor_started(state, event)
        case ExecutorStartFailed():
            if state.phase is not Phase.STARTING:
                return state, ()
            failure = TurnFailure("EXECUTOR_UNAVAILABLE", event.detail)
            execution = Execution.UNKNOWN if event.may_have_started else Execution.NOT_STARTED
            settling = replace(state, phase=Phase.SETTLING)
            decision = SettlementDecision(RowState.FAILED, error=failure)
            if state.execution_number > 1:  # R15: an earlier execution of the turn ran
                return settle(settling, decision, Execution.STARTED, current=execution)
            return settle(settling, decision, execution)
        case LimitTimerFired():
            return _limit_timer_fired(state, event)
        case ExecutorFinished():
            if state.phase is not Phase.RUNNING:
                return state, ()
            return _executor_finished(state, event)
        case ExecutionEndWritten():
            if state.phase is not Phase.BACKOFF or state.retry_at is None:
                return state, ()
            return state, (ArmRetryTimer(state.retry_at),)
        case ExecutionEndFailed():
            if state.phase is not Phase.BACKOFF:
                return state, ()
            # R7: the end of a billed execution could not be saved: no retry,
            # the slot stays held until restart (the row reads INTERRUPTED).
            return replace(state, phase=Phase.HELD, result_not_saved=True, retry_at=None), ()
        case RetryTimerFired():
            return _retry_timer_fired(state, event)
        case SettlementWritten():
            if not state.settlement_pending:
                return state, ()
            if state.phase in FINAL_PHASES:  # its slot is back already: never twice
                return replace(state, settlement_pending=False), ()
            settled = replace(state, phase=Phase.SETTLED, settlement_pending=False)
            return settled, (FreeSlot(),)
        case SettlementWriteFailed():
            if not state.settlement_pending:
                return state, ()
            if state.phase in FINAL_PHASES:
                return replace(state, settlement_pending=False), ()
            # R7: never report a result that could not be saved; the slot stays
            # held. A Cancel's settlement that failed before the launch check
            # leaves the job ADMITTED: the launch check still comes and settles
            # it again.
            phase = Phase.HELD if state.phase is Phase.SETTLING else state.phase
            return replace(state, phase=phase, settlement_pending=False, result_not_saved=True), ()
        case CancelRequested():
            return _cancel_requested(state, event)
        case DrainStarted():
            if state.phase in FINAL_PHASES:
                return state, ()
            if state.phase is Phase.BACKOFF:  # R15: no executor to let finish
                return _stop_in_backoff(state, StopReason.SHUTDOWN)
            # R8: recorded, but the executor is let finish until the drain deadline.
            return _record_stop(state, StopReason.SHUTDOWN, ask_executor=False)
        case DrainDeadlinePassed():
            return state, (StopExecutor(),) if state.executor_live else ()
        case JobCrashed():
            if state.phase in FINAL_PHASES:
                return state, ()
            return replace(
                state, phase=Phase.HELD, settlement_pending=False, result_not_saved=True
            ), ()
        case JobAbandoned():
            if state.phase in FINAL_PHASES:
                return state, ()
            return replace(state, phase=Phase.HELD, settlement_pending=False), ()
        case _:
            assert_never(event)


def _executor_started(state: JobState, event: ExecutorStarted) -> Step:
    if state.phase is not Phase.STARTING:
        return state, ()
    at = event.at
    # The turn's start is its first execution's (the budget counts from it);
    # each execution has its own (its heartbeats count from it, R12).
    first = state.started_at if state.started_at is not None else at
    state = replace(state, execution_started_at=at)
    if event.finished is not None:
        # Its outcome was in hand as it started: no confirmation of its own,
        # the settlement records the start (R3).
        finished = replace(state, phase=Phase.RUNNING, started_at=first)
        settling, settle = _executor_finished(finished, event.finished)
        return settling, (RecordProcessGroup(at), *settle)
    running = replace(state, phase=Phase.RUNNING, started_at=first, confirmation_queued=True)
    alarm = _next_alarm(running, now=None, last_heartbeat=None)
    commands: list[Command] = [RecordProcessGroup(at), WriteConfirmStart(at)]
    if state.stop_reason is not None:  # a stop came while the executor was starting
        commands.append(StopExecutor())
    if alarm is not None:
        commands.append(ArmLimitTimer(alarm))
    return replace(running, limit_alarm=alarm), tuple(commands)


def _next_alarm(
    state: JobState, *, now: float | None, last_heartbeat: float | None
) -> float | None:
    """The earliest limit still to come after ``now``: the deadline, the budget's
    end, the next heartbeat due (R12). Each is checked when it comes, and the
    first found run out stops the turn (then no alarm is armed again)."""
    started = state.started_at
    budget_ends = (
        started + state.budget_seconds
        if started is not None and state.budget_seconds is not None
        else None
    )
    due = heartbeat_due(state.execution_started_at, last_heartbeat, state.heartbeat_seconds)
    times = [t for t in (state.deadline, budget_ends, due) if t is not None]
    later = [t for t in times if now is None or t > now]
    return min(later) if later else None


def _executor_finished(state: JobState, event: ExecutorFinished) -> Step:
    """R7: settle from the first stop reason and the outcome, once; or, R15, end
    the execution and wait for the next when its failure is retryable. A start
    confirmation still queued is withdrawn: the settlement (or the execution's
    end) records the start."""
    decision = decide_settlement(state.stop_reason, event.outcome, event.known_reasons)
    withdraw = (WithdrawConfirmStart(),) if state.confirmation_queued else ()
    ended = replace(state, confirmation_queued=False, limit_alarm=None)
    retry = retry_after_failure(
        ended.retry,
        decision,
        stop_reason=ended.stop_reason,
        ended_execution=ended.execution_number,
        now=event.now,
        deadline=ended.deadline,
        budget_ends=_budget_ends(ended),
    )
    if retry is not None and decision.error is not None:
        waiting = replace(ended, phase=Phase.BACKOFF, retry_at=retry.at, retry_reason=retry.reason)
        write = WriteExecutionEnd(decision.error, started_at=ended.execution_started_at)
        return waiting, (*withdraw, write)
    settling = replace(ended, phase=Phase.SETTLING)
    settling, written = settle(
        settling, decision, Execution.STARTED, started_at=ended.execution_started_at
    )
    return settling, (*withdraw, *written)


def _budget_ends(state: JobState) -> float | None:
    if state.started_at is None or state.budget_seconds is None:
        return None
    return state.started_at + state.budget_seconds


def _retry_timer_fired(state: JobState, event: RetryTimerFired) -> Step:
    """R15: the wait is over; the next execution gets its own launch intent."""
    if state.phase is not Phase.BACKOFF or state.retry_at is None or event.now < state.retry_at:
        return state, ()
    if state.stop_reason is not None:  # settled by the stop already (_stop_in_backoff)
        return state, ()
    number = state.execution_number + 1
    launching = replace(
        state, phase=Phase.LAUNCHING, execution_number=number, execution_started_at=None
    )
    return launching, (WriteLaunchIntent(number=number, reason=state.retry_reason),)


def _stop_in_backoff(state: JobState, reason: StopReason) -> Step:
    """R15: a stop during the wait ends the turn with that stop; nothing more runs.
    The row records the stop and settles in one write (no executor to ask)."""
    record = (WriteStopReason(reason),) if state.stop_reason is None else ()
    first = first_stop_reason(state.stop_reason, reason)
    stopped = replace(state, phase=Phase.SETTLING, stop_reason=first, retry_at=None)
    settling, written = settle(stopped, stopped_in_backoff(first), Execution.STARTED)
    return settling, (*record, *written)


def _limit_timer_fired(state: JobState, event: LimitTimerFired) -> Step:
    """The first limit found run out stops the turn (R6, R12); otherwise the timer
    is armed for the next one to come. ``event.last_heartbeat``: the executor's
    latest sign of life, which the shell records as it comes."""
    if state.phase is not Phase.RUNNING or state.limit_alarm is None:
        return state, ()
    due = due_stop_reason(
        now=event.now,
        deadline=state.deadline,
        started_at=state.started_at,
        budget_seconds=state.budget_seconds,
        heartbeat_due=heartbeat_due(
            state.started_at, event.last_heartbeat, state.heartbeat_seconds
        ),
    )
    if due is not None:
        return _record_stop(replace(state, limit_alarm=None), due, ask_executor=True)
    alarm = _next_alarm(state, now=event.now, last_heartbeat=event.last_heartbeat)
    return replace(state, limit_alarm=alarm), (ArmLimitTimer(alarm),) if alarm is not None else ()


def _cancel_requested(state: JobState, event: CancelRequested) -> Step:
    if state.phase in FINAL_PHASES:
        return state, ()
    if state.phase is Phase.BACKOFF:
        return _stop_in_backoff(state, StopReason.CANCEL)
    row = event.row
    unlaunched = row.state is RowState.ACCEPTED and state.phase in (Phase.ADMITTED, Phase.HELD)
    if unlaunched or state.phase is Phase.READY:
        # Never launched, or (READY) its intent durable and no executor asked to
        # start: it settles now, NOT_STARTED (C14, core/job_launch.py). The phase
        # stays: if this write fails, a job still ADMITTED retries at its launch
        # check, one still READY at its start (StartDue).
        reason = first_stop_reason(state.stop_reason, StopReason.CANCEL)
        return settle(
            replace(state, stop_reason=reason),
            unlaunched_settlement(reason),
            Execution.NOT_STARTED,
        )
    if row.incarnation_id != state.incarnation_id:
        return state, ()  # an earlier incarnation's launch: it can no longer run here
    # Launched: record the reason and ask; the slot waits for the settlement (R6).
    return _record_stop(state, StopReason.CANCEL, ask_executor=True)


def _record_stop(state: JobState, reason: StopReason, *, ask_executor: bool) -> Step:
    """R6: the first reason is kept and written; the executor is asked each time."""
    commands: list[Command] = []
    if state.stop_reason is None:
        state = replace(state, stop_reason=reason)
        commands.append(WriteStopReason(reason))
    if ask_executor and state.executor_live:
        commands.append(StopExecutor())
    return state, tuple(commands)
