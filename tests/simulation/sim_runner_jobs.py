"""The simulated runner's jobs: the real ``runner_svc.core.job_lifecycle`` machine,
interpreted synchronously against the simulated store, ledger and slot pools.

This is ``runner_svc.jobs`` without the event loop: every decision about a job
is made by ``job_lifecycle.step``; this module only feeds it what the simulated
world did (the row read for the launch check, writes that landed or failed, the
executor's start and outcome, Cancels, the drain) and performs its commands, in
order, answering each request before the next command. One call is one atomic
step (the real shell holds the operation's lock for the same span).

The schedule picks what the world does: how far a launch gets before the
runner crashes (R3: right after the launch intent is durable, or right after
the executor started, before the confirmation), whether the executor refuses
to start, how it ends, and whether a step's store writes fail. An executor
start is the billable event: it goes into the ledger the checker counts.

A job admitted with its launch intent (issue 27) is READY: its launch is the
start alone (``StartDue``), and "intent" crashes right before it (the intent
is the admission's, already durable). Between its admission and its launch
step any other action may come (a Cancel, the drain, a restart), a window the
real runner keeps to one turn of its event loop: the simulation explores it
wide open. A restart counts what every job that had not started leaves
behind (``restart:unstarted_accepted``: a row a later incarnation may
re-admit; ``restart:unstarted_intent``: an intent, read UNKNOWN ever after,
``restart:unstarted_admission_intent`` when the admission wrote it).

R15: a failed execution may declare effect NONE or APPLIED (``finish ...
failed-none`` / ``failed-applied``); on a turn with a retry policy
(world.turn_retry) the machine then ends the execution without settling and
waits (phase "backoff"); ``retry`` fires the wait's timer once it is due, and
the next execution goes through the same launch variants (a crash after its
own intent, or after its start before the confirmation). A restart during the
wait kills the job: the row reads INTERRUPTED.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol, assert_never

from runner_svc.core.admission import SlotPools
from runner_svc.core.job_lifecycle import (
    ArmLimitTimer,
    ArmRetryTimer,
    CancelRequested,
    Command,
    DrainStarted,
    ExecutionEndFailed,
    ExecutionEndWritten,
    ExecutorFinished,
    ExecutorStarted,
    ExecutorStartFailed,
    FreeSlot,
    JobEvent,
    JobState,
    LaunchChecked,
    LaunchIntentFailed,
    LaunchIntentWritten,
    LimitTimerFired,
    NoteNotLaunched,
    Phase,
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
    admitted,
    step,
)
from runner_svc.core.model import OperationRow, RowState, SlotKind, StopReason
from runner_svc.core.settlement import ReportedOutcome
from runner_svc.core.transitions import (
    ConfirmStart,
    EndExecution,
    IllegalRowEvent,
    LaunchIntent,
    RecordStopReason,
    RetryIntent,
    RowEvent,
    Settle,
)
from tests.simulation.world import ExecutionEntry, Ledger
from turnwire.errors import REASONS
from turnwire.retry_policy import RetryRule

# What the schedule generator (menu.py) and the heal read off a job: "admitted"
# may launch, "running" may finish, "result_not_saved" holds its slot until a
# restart (R7). The other phases last only inside one step.
PHASE_NAMES: dict[Phase, str] = {
    Phase.ADMITTED: "admitted",
    Phase.READY: "admitted",  # admitted with its intent: its launch is the start
    Phase.LAUNCHING: "launching",
    Phase.STARTING: "launching",
    Phase.RUNNING: "running",
    Phase.SETTLING: "settling",
    Phase.BACKOFF: "backoff",
    Phase.SETTLED: "settled",
    Phase.RELEASED: "released",
    Phase.HELD: "result_not_saved",
}
# How far a launch gets (menu.LAUNCH_VARIANTS): "intent" and "start" are the
# crash points, "refused" an executor that refuses to start.
LAUNCH_UNTIL = frozenset({"confirm", "intent", "start", "refused"})


class StoreWriteFailed(Exception):
    """The schedule made this store write fail (R4, R7: fail closed)."""


class CrashPoint(Exception):
    """The runner dies here, as the schedule chose; the simulator restarts it."""


class JobStore(Protocol):
    """What the jobs use of the simulated store (sim_runner.SimStore)."""

    store_id: str
    rows: dict[str, OperationRow]

    def write(self, operation_id: str, change: RowEvent) -> OperationRow: ...


@dataclass
class SimJob:
    """An admitted operation holding a slot (``runner_svc.jobs.Job``)."""

    operation_id: str
    kind: SlotKind
    attempt: int
    state: JobState
    # Its executor's start in the ledger, once started.
    execution: ExecutionEntry | None = None
    # When its limit timer is armed to wake (R12: the heartbeat), if it is.
    alarm: float | None = None
    # R15: when its retry timer is armed to wake (in "backoff").
    retry_alarm: float | None = None

    @property
    def phase(self) -> str:
        return PHASE_NAMES[self.state.phase]

    @property
    def stop_reason(self) -> StopReason | None:
        return self.state.stop_reason

    @property
    def result_not_saved(self) -> bool:
        return self.state.result_not_saved


@dataclass
class _World:
    """What the simulated world does during one step, and what it saw."""

    now: float | None  # None: a step that writes no settlement (the drain)
    until: str = "confirm"
    write_fails: bool = False  # every store write of the step fails
    launching: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass
class SimJobRunner:
    """Launches, stops and settles one incarnation's jobs (``runner_svc.jobs.JobRunner``)."""

    name: str
    incarnation_id: str
    store: JobStore
    ledger: Ledger
    pools: SlotPools
    counters: Counter[str]
    jobs: dict[str, SimJob] = field(default_factory=dict)

    def admit(
        self,
        operation_id: str,
        kind: SlotKind,
        attempt: int,
        *,
        draining: bool,
        heartbeat_seconds: float | None = None,
        retry: RetryRule | None = None,
        with_intent: bool = False,
    ) -> None:
        """Register the job of a row just admitted (its slot is reserved), READY when
        its admission wrote the launch intent. The simulated envelopes carry no
        deadline and no budget; some carry a heartbeat timeout
        (world.turn_heartbeat), some a retry policy (R15)."""
        state = admitted(
            self.incarnation_id,
            deadline=None,
            budget_seconds=None,
            heartbeat_seconds=heartbeat_seconds,
            draining=draining,
            retry=retry,
            with_intent=with_intent,
        )
        self.jobs[operation_id] = SimJob(operation_id, kind, attempt, state)

    def launch(self, operation_id: str, now: float, *, until: str) -> str:
        """The launch check, then whatever the machine asks: launch intent,
        executor start (the ledger entry), start confirmation (R3).

        ``until``: "intent" (crash once the intent is durable), "start" (crash
        once the executor started, before its confirmation), "refused" (the
        executor refuses to start) or "confirm" (all of it). With "intent" or
        "start", the result starts with "launch" or "executor st" exactly when
        the crash point was reached (the simulator then restarts the runner).
        """
        assert until in LAUNCH_UNTIL, until
        job = self.jobs[operation_id]
        world = _World(now, until=until, launching=True)
        if job.state.phase is Phase.READY:
            if until == "intent":  # runner.after_launch_intent, before the start
                return "launch intent written with the admission; not started"
            event: JobEvent = StartDue(now)
        else:
            event = LaunchChecked(self.store.rows.get(operation_id), now)
        try:
            self._feed(job, event, world)
        except CrashPoint as crash:
            return str(crash)
        return "; ".join(world.notes)

    def finish(
        self, operation_id: str, succeeded: bool, now: float, write_fails: bool, effect: str = ""
    ) -> str:
        """The executor ended; the machine settles it (R7), or, R15, ends the
        execution and waits to retry it. ``effect``: what a failure declared
        ("NONE", "APPLIED", "" nothing). ``write_fails``: its writes are not saved."""
        job = self.jobs[operation_id]
        assert job.execution is not None
        output = f"result:{operation_id}:#{job.execution.index}".encode()
        job.execution.outcome = "succeeded" if succeeded else "failed"
        job.execution.output = output if succeeded else b""
        job.execution.effect = "" if succeeded else effect
        job.execution.ended_at = now
        outcome = ReportedOutcome(
            succeeded=succeeded,
            output=output if succeeded else b"",
            error_reason="" if succeeded else "EXECUTOR_FAILED",
            error_message="" if succeeded else "the executor failed",
            effect="" if succeeded else effect,
        )
        world = _World(now, write_fails=write_fails)
        self._feed(job, ExecutorFinished(outcome, REASONS, now=now), world)
        ended = f"executor ended {job.execution.outcome}" + (f" effect {effect}" if effect else "")
        return "; ".join([ended, *world.notes])

    def retry(self, operation_id: str, now: float, *, until: str) -> str:
        """R15: the retry wait is over; the next execution's launch intent, start and
        confirmation, with ``launch``'s crash points (``until``)."""
        assert until in LAUNCH_UNTIL, until
        job = self.jobs[operation_id]
        assert job.retry_alarm is not None and now >= job.retry_alarm
        job.retry_alarm = None
        world = _World(now, until=until, launching=True)
        self.counters["retry:fired"] += 1
        try:
            self._feed(job, RetryTimerFired(now=now), world)
        except CrashPoint as crash:
            return str(crash)
        return "; ".join(["retry", *world.notes])

    def lapse(self, operation_id: str, now: float) -> str:
        """R12: the executor never heartbeat; its alarm fires at ``now`` (past it).
        The machine records HEARTBEAT and asks the executor to stop; how it ends
        is the schedule's next finish."""
        job = self.jobs[operation_id]
        assert job.alarm is not None and now >= job.alarm
        job.alarm = None
        world = _World(now)
        self._feed(job, LimitTimerFired(now=now, last_heartbeat=None), world)
        self.counters["heartbeat:lapsed"] += 1
        return "; ".join([f"heartbeat lapsed, stop reason {job.stop_reason}", *world.notes])

    def cancel(self, job: SimJob, row: OperationRow, now: float, write_fails: bool) -> None:
        """A Cancel for this job, with its row as read in the same step (R6)."""
        if job.state.phase is Phase.BACKOFF:
            self.counters["retry:stopped_in_backoff"] += 1
        self._feed(job, CancelRequested(row), _World(now, write_fails=write_fails))

    def drain(self, now: float | None = None) -> None:
        """R8: every job is told; SHUTDOWN is recorded where no reason exists. A job
        waiting to retry settles now (R15): ``now`` is the settlement's time."""
        for job in list(self.jobs.values()):
            if job.state.phase is Phase.BACKOFF:
                self.counters["retry:stopped_in_backoff"] += 1
            self._feed(job, DrainStarted(), _World(now))

    def die(self) -> None:
        """The process dies: its executors with it (R10), nothing is settled."""
        for job in self.jobs.values():
            if job.state.phase is Phase.BACKOFF:
                self.counters["retry:died_in_backoff"] += 1
            row = self.store.rows.get(job.operation_id)
            if job.execution is None and row is not None and not row.settled:
                # Nothing of it started: what its row tells the next incarnation.
                kind = "accepted" if row.state is RowState.ACCEPTED else "intent"
                self.counters[f"restart:unstarted_{kind}"] += 1
                self.ledger.unstarted_at_crash[job.operation_id] = kind
                if job.state.phase is Phase.READY:  # the intent is its admission's
                    self.counters["restart:unstarted_admission_intent"] += 1
            if job.execution is not None and job.execution.outcome is None:
                job.execution.outcome = "killed"
                job.execution.ended_at = -1.0  # over: the process group died with it

    # --- the interpreter -------------------------------------------------------------

    def _feed(self, job: SimJob, event: JobEvent, world: _World) -> None:
        job.state, commands = step(job.state, event)
        for command in commands:
            answer = self._do(job, command, world)
            if answer is not None:  # a request's answer goes in before the next command
                self._feed(job, answer, world)

    def _do(self, job: SimJob, command: Command, world: _World) -> JobEvent | None:
        """Perform one command against the simulated world; a request returns its answer."""
        op = job.operation_id
        match command:
            case NoteNotLaunched():
                world.notes.append(f"not launched: {command.why}")
            case WriteExecutionEnd():
                change = EndExecution(
                    self.incarnation_id, world.now or 0.0, command.error, command.started_at
                )
                if not self._write(op, change, world):
                    world.notes.append("execution end NOT saved (slot held, no retry)")
                    return ExecutionEndFailed()
                self.counters["retry:execution_ended"] += 1
                return ExecutionEndWritten()
            case ArmRetryTimer():
                job.retry_alarm = command.at
                world.notes.append(f"retry wait until {command.at:g}")
            case WriteLaunchIntent():
                intent: LaunchIntent | RetryIntent = (
                    LaunchIntent(self.incarnation_id, world.now or 0.0)
                    if command.number <= 1
                    else RetryIntent(self.incarnation_id, world.now or 0.0, command.reason)
                )
                if command.number > 1:
                    self.counters["retry:intent"] += 1
                if not self._write(op, intent, world):
                    world.notes.append("not launched: launch intent NOT saved (slot held)")
                    return LaunchIntentFailed()
                if world.until == "intent":
                    raise CrashPoint("launch intent written")
                return LaunchIntentWritten()
            case StartExecutor():
                return self._start_executor(job, world)
            case RecordProcessGroup():
                pass  # a simulated executor dies with its runner (die): nothing to sweep
            case WriteConfirmStart():
                saved = self._write(
                    op, ConfirmStart(self.incarnation_id, command.started_at), world
                )
                world.notes.append("confirmed" if saved else "confirmation NOT saved")
            case WithdrawConfirmStart():
                # The launch step wrote its confirmation (one step is atomic):
                # nothing is still queued here to withdraw.
                pass
            case WriteStopReason():
                if not self._write(op, RecordStopReason(command.reason), world):
                    world.notes.append(f"stop reason {command.reason} kept in memory only")
            case StopExecutor():
                # The executor's end is the schedule's choice (finish ok|failed).
                if world.launching:
                    self.counters["launch:stop_came_first"] += 1
            case ArmLimitTimer():
                assert job.state.heartbeat_seconds is not None, f"{op}: only heartbeats time it"
                job.alarm = command.at
            case WriteSettlement():
                return self._write_settlement(job, command, world)
            case FreeSlot():
                self.pools.free(job.kind)
                if self.jobs.get(op) is job:
                    del self.jobs[op]
            case _:
                assert_never(command)
        return None

    def _start_executor(self, job: SimJob, world: _World) -> JobEvent:
        op = job.operation_id
        if world.until == "refused":
            self.ledger.start_refusals.append((op, self.incarnation_id))
            world.notes.append("executor refused to start")
            return ExecutorStartFailed("start refused", may_have_started=False)
        assert world.now is not None
        row = self.store.rows.get(op)
        job.execution = self.ledger.start(
            op,
            self.name,
            self.incarnation_id,
            self.store.store_id,
            job.attempt,
            world.now,
            number=job.state.execution_number,
            intent_number=row.executions[-1].number if row is not None and row.executions else 0,
        )
        if job.state.execution_number > 1:
            self.counters["retry:executions"] += 1
        started = f"executor started (execution #{job.execution.index})"
        if world.until == "start":
            raise CrashPoint(f"{started}, not confirmed")
        world.notes.append(started)
        return ExecutorStarted(at=world.now)

    def _write_settlement(self, job: SimJob, command: WriteSettlement, world: _World) -> JobEvent:
        decision = command.decision
        assert world.now is not None, "this step settles nothing"
        change = Settle(
            self.incarnation_id,
            decision.state,
            command.execution,
            world.now,
            result=decision.result,
            error=decision.error,
            started_at=command.started_at,
            current_execution=command.current_execution,
        )
        if not self._write(job.operation_id, change, world):
            world.notes.append(f"settled {decision.state} NOT SAVED (slot held)")
            return SettlementWriteFailed()
        world.notes.append(f"settled {decision.state}")
        return SettlementWritten()

    def _write(self, operation_id: str, change: RowEvent, world: _World) -> bool:
        """One store write; False when it failed (the schedule's, or an illegal edge)."""
        try:
            if world.write_fails:
                raise StoreWriteFailed("the schedule failed this write")
            self.store.write(operation_id, change)
        except (StoreWriteFailed, IllegalRowEvent):
            return False
        return True
