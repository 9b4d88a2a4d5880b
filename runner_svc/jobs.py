"""The async shell around each admitted turn's state machine (core/job_lifecycle.py).

A job is made by a successful admission (it holds one slot) and ends when its
settlement is durable, which is the only moment its slot is freed (R6, R7).
Every decision about it is made by ``job_lifecycle.step``: this module feeds
it what happened (the row read for the launch check, writes that landed or
failed, the executor's start and outcome, limit timers, Cancels, the drain)
and performs the commands it returns, in order, answering each request
before the next command.

The per-operation lock (shared with the service's Dispatch/Cancel) makes the
launch check, the launch intent and the executor's start one step with
respect to a Cancel. A turn admitted with its launch intent (issue 27: the
admission's commit carried it) skips the check and the write: its run begins
with ``StartDue`` under the same lock. The start confirmation is queued behind
the store's writer, not awaited: a turn that finishes before the writer takes
it up withdraws it and its settlement records the start (R3; core/job_lifecycle.py).
The crash points sit between the same durable writes as ever: after the
launch intent (its own write's, or the admission's: the executor not yet
started either way), and after the executor finished but before its
settlement is written (whether or not its start confirmation was).

Each job has an output stream in the runner's OutputHub (R13) from admission
to the end of its run, and a channel its executor emits chunks and heartbeats
on (R12): a heartbeat only stamps the job, and the limit timer hands the last
stamp to the machine, which decides when silence has lasted too long.

A retry (R15) is the same job going round again: the machine ends the failed
execution (``BACKOFF``), the shell sleeps until the retry timer (woken early
by a Cancel or the drain, which the machine settles), then feeds the timer
and performs the next launch intent and start. The next execution starts
only after the previous one's ``wait()`` returned: never two at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, assert_never

from runner_svc import turn_limits
from runner_svc.core.admission import SlotPools
from runner_svc.core.job_lifecycle import (
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
from runner_svc.core.model import DEFAULT_EXECUTOR, OperationRow, SlotKind, StopReason
from runner_svc.core.transitions import (
    ConfirmStart,
    EndExecution,
    IllegalRowEvent,
    LaunchIntent,
    RecordStopReason,
    RetryIntent,
    Settle,
)
from runner_svc.executors import (
    ExecutionHandle,
    ExecutionOutcome,
    ExecutionRequest,
    ExecutorProcess,
    ExecutorStartError,
    outcome_if_settled,
)
from runner_svc.executors.outcomes import reported_outcome
from runner_svc.executors.registry import ExecutorSet
from runner_svc.job_table import Job, pending, wait_all
from runner_svc.output_streams import JobChannel, OutputHub
from runner_svc.storage.async_store import AsyncRunnerStore
from runner_svc.storage.sqlite_store import StoreError
from turnwire.crashpoints import crash_point
from turnwire.errors import REASONS
from turnwire.observability import tracing
from turnwire.observability.logs import turn_context
from turnwire.runner.v1 import runner_pb2

log = logging.getLogger("runner_svc.jobs")

_LOCK_STRIPES = 256


class JobRunner:
    """Launches, stops and settles jobs; owns the slot pools and the job table."""

    def __init__(
        self,
        store: AsyncRunnerStore,
        executors: ExecutorSet,
        pools: SlotPools,
        output: OutputHub,
        *,
        cancel_grace_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.executors = executors
        self.output = output
        self.pools = pools
        self.incarnation_id = store.incarnation_id
        self.jobs: dict[str, Job] = {}
        self._grace = cancel_grace_seconds
        self._clock = clock
        self._locks = [asyncio.Lock() for _ in range(_LOCK_STRIPES)]

    def lock(self, operation_id: str) -> asyncio.Lock:
        """The lock serializing every decision about one operation (striped, bounded)."""
        return self._locks[hash(operation_id) % _LOCK_STRIPES]

    def held_result_not_saved(self) -> int:
        return sum(1 for job in self.jobs.values() if job.result_not_saved)

    def admit(
        self,
        operation_id: str,
        kind: SlotKind,
        attempt: int,
        envelope: runner_pb2.TurnEnvelope,
        envelope_bytes: bytes,
        *,
        draining: bool,
        with_intent: bool = False,
    ) -> Job:
        """Register the job of a row just admitted (its slot is reserved) and
        launch it in the background (after the reply). ``with_intent``: the row
        was written with its launch intent (R3, R4): the start is next."""
        state = admitted(
            self.incarnation_id,
            deadline=turn_limits.deadline(envelope),
            budget_seconds=turn_limits.budget_seconds(envelope),
            heartbeat_seconds=turn_limits.heartbeat_seconds(envelope),
            draining=draining,
            retry=turn_limits.retry_rule(envelope),
            with_intent=with_intent,
        )
        job = Job(operation_id, kind, attempt, envelope, envelope_bytes, state)
        self.jobs[operation_id] = job
        self.output.open(operation_id)
        with self._turn(job):  # the job's lines (and its tasks') name its turn
            job.task = asyncio.create_task(self._traced_run(job), name=f"job-{operation_id}")
        return job

    def _turn(self, job: Job) -> contextlib.AbstractContextManager[None]:
        return turn_context(
            job.operation_id,
            attempt=job.attempt,
            incarnation=self.incarnation_id,
            principal=job.envelope.principal,
        )

    def _traced_run(self, job: Job) -> Coroutine[Any, Any, None]:
        """The job's run inside a span of the turn's trace (launch, executor,
        settlement) when tracing is on; the run itself when off (docs/TRACING.md)."""
        return tracing.traced_execution(
            self._run(job),
            "turnwire.runner.execute",
            job.envelope,
            attempt=job.attempt,
            incarnation_id=self.incarnation_id,
        )

    async def cancel(self, job: Job, row: OperationRow) -> None:
        """A Cancel for this job (R6). The caller holds the operation's lock and
        read ``row`` under it."""
        await self._feed(job, CancelRequested(row))

    async def _run(self, job: Job) -> None:
        op = job.operation_id
        try:
            async with self.lock(op):
                await self._feed(job, await self._first_event(job))
            while True:
                if _waits_to_retry(job):  # R15: also after one that finished as it started
                    await self._next_execution(job)
                    continue
                if job.handle is None or job.state.phase is not Phase.RUNNING:
                    break
                outcome = await self._wait_with_limits(job, job.handle)
                crash_point("runner.after_executor_finished")
                # Decided before the lock is taken: a Cancel that gets the lock
                # first is recorded (R6) but does not rewrite this outcome.
                finished = ExecutorFinished(reported_outcome(outcome), REASONS, now=self._clock())
                settle = self._step(job, finished)
                async with self.lock(op):
                    await self._perform(job, settle)
            # Out of the loop: nothing started, it finished (settled or held).
        except asyncio.CancelledError:
            self._step(job, JobAbandoned())  # no commands: it only ends the job's run
            raise
        except Exception:
            # Fail closed: the slot stays held and the row says what is durable.
            self._step(job, JobCrashed())  # no commands: it only ends the job's run
            log.exception("job %s crashed; slot held until restart", op)
        finally:
            self.output.end(op)  # its readers get their end (R13)
            job.done.set()

    async def _next_execution(self, job: Job) -> None:
        """R15: wait out the backoff (a Cancel or the drain may settle the job
        meanwhile, and wakes it), then start the next execution."""
        while job.state.phase is Phase.BACKOFF and job.retry_alarm is not None:
            remaining = job.retry_alarm - self._clock()
            if remaining <= 0:
                break
            job.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(job.wake.wait(), timeout=remaining)
        crash_point("runner.before_retry_intent")
        async with self.lock(job.operation_id):
            await self._feed(job, RetryTimerFired(now=self._clock()))

    # --- feeding the machine ---------------------------------------------------------

    def _step(self, job: Job, event: JobEvent) -> tuple[Command, ...]:
        job.state, commands = step(job.state, event)
        return commands

    async def _feed(self, job: Job, event: JobEvent) -> None:
        await self._perform(job, self._step(job, event))
        if job.state.phase is not Phase.BACKOFF:
            job.wake.set()  # a retry wait, if any, is over (R15)

    async def _perform(self, job: Job, commands: Iterable[Command]) -> None:
        for command in commands:
            answer = await self._do(job, command)
            if answer is not None:  # a request's answer goes in before the next command
                await self._feed(job, answer)

    async def _do(self, job: Job, command: Command) -> JobEvent | None:
        """Perform one command; a request returns its answer."""
        match command:
            case NoteNotLaunched():
                log.info("operation %s not launched: %s", job.operation_id, command.why)
            case WriteLaunchIntent():
                return await self._write_launch_intent(job, command)
            case WriteExecutionEnd():
                return await self._write_execution_end(job, command)
            case ArmRetryTimer():
                job.retry_alarm = command.at
            case StartExecutor():
                return await self._start_executor(job)
            case RecordProcessGroup():
                await self._record_process(job, command.started_at)
            case WriteConfirmStart():
                self._queue_confirm_start(job, command.started_at)
            case WithdrawConfirmStart():
                self._withdraw_confirm_start(job)
            case WriteStopReason():
                await self._write_stop_reason(job, command.reason)
            case StopExecutor():
                if job.handle is not None:
                    await job.handle.cancel(self._grace)
            case ArmLimitTimer():
                job.limit_alarm = command.at
            case WriteSettlement():
                return await self._write_settlement(job, command)
            case FreeSlot():
                self.pools.free(job.kind)
                if self.jobs.get(job.operation_id) is job:
                    del self.jobs[job.operation_id]
            case _:
                assert_never(command)
        return None

    # --- launch (R3) -------------------------------------------------------------------

    async def _first_event(self, job: Job) -> JobEvent:
        """What the job's run begins with: the launch check for a row admitted alone,
        the start for one whose admission wrote its intent (the machine decides
        what either leads to)."""
        if job.state.phase is Phase.READY:
            crash_point("runner.after_launch_intent")  # the admission's, not yet started
            return StartDue(now=self._clock())
        return await self._launch_check(job)

    async def _launch_check(self, job: Job) -> JobEvent:
        try:
            row = await self.store.get(job.operation_id)
        except StoreError:
            log.exception(
                "launch check of %s could not read the store; slot held", job.operation_id
            )
            return LaunchCheckFailed()
        return LaunchChecked(row, now=self._clock())

    async def _write_launch_intent(self, job: Job, command: WriteLaunchIntent) -> JobEvent:
        op, at = job.operation_id, self._clock()
        change: LaunchIntent | RetryIntent = (
            LaunchIntent(self.incarnation_id, at)
            if command.number <= 1
            else RetryIntent(self.incarnation_id, at, command.reason)
        )
        try:
            await self.store.write(op, change)
        except (StoreError, IllegalRowEvent):
            log.exception("launch intent of %s not saved; not launched, slot held", op)
            return LaunchIntentFailed()
        crash_point("runner.after_launch_intent")
        return LaunchIntentWritten()

    async def _write_execution_end(self, job: Job, command: WriteExecutionEnd) -> JobEvent:
        """R15: the failed execution's end, durable before any wait or retry."""
        op = job.operation_id
        change = EndExecution(self.incarnation_id, self._clock(), command.error, command.started_at)
        try:
            await self.store.write(op, change)
        except (StoreError, IllegalRowEvent):
            log.exception(
                "end of execution %d of %s not saved; no retry", job.state.execution_number, op
            )
            return ExecutionEndFailed()
        log.info(
            "operation %s execution %d failed with effect NONE: retry at %s",
            op,
            job.state.execution_number,
            job.state.retry_at,
        )
        crash_point("runner.after_execution_end")
        return ExecutionEndWritten()

    async def _start_executor(self, job: Job) -> JobEvent:
        op = job.operation_id
        name = job.envelope.executor or DEFAULT_EXECUTOR
        executor = self.executors.get(name)
        if executor is None:  # admission refuses these (R14): a store from another config
            return ExecutorStartFailed(f"executor {name!r} is not served", may_have_started=False)
        traceparent, tracestate = tracing.executor_trace_context(job.envelope)
        request = ExecutionRequest(
            op,
            self.incarnation_id,
            job.attempt,
            job.envelope,
            job.envelope_bytes,
            traceparent=traceparent,
            tracestate=tracestate,
            channel=JobChannel(job, self.output, self._clock),
            executor=name,
            stream_limits=self.output.limits,
            execution=job.state.execution_number,  # ctx.attempt (R15)
        )
        try:
            handle = await executor.start(request)
        except ExecutorStartError as exc:
            log.warning("executor refused to start %s: %s", op, exc)
            return ExecutorStartFailed(_detail(exc), may_have_started=False)
        except Exception as exc:
            log.exception("executor start of %s failed oddly: it may have started", op)
            return ExecutorStartFailed(_detail(exc), may_have_started=True)
        job.handle = handle
        at = self._clock()
        outcome = outcome_if_settled(handle)
        if outcome is None:
            return ExecutorStarted(at)
        # Finished as it started: its settlement comes next, with no confirmation.
        crash_point("runner.after_executor_finished")
        finished = ExecutorFinished(reported_outcome(outcome), REASONS, now=at)
        return ExecutorStarted(at, finished=finished)

    async def _record_process(self, job: Job, started_at: float) -> None:
        """R10: write down the executor's process group, so the next incarnation
        can end it if this one dies first (runner_svc/executor_sweep.py)."""
        process = getattr(job.handle, "process", None)
        if not isinstance(process, ExecutorProcess):
            return
        try:
            await self.store.record_executor_process(
                job.operation_id, process.pgid, process.start_time, process.boot_id, started_at
            )
        except StoreError as exc:
            # The death signal and the watchdog still end it with this runner.
            log.error(
                "process group %d of %s not recorded: a restart cannot end it: %s",
                process.pgid,
                job.operation_id,
                exc,
            )

    def _queue_confirm_start(self, job: Job, started_at: float) -> None:
        """R3's second step, queued behind the store's writer; the job goes on to
        wait for the outcome. Unsaved, the row stays LAUNCHING: after a crash
        it says UNKNOWN, which is true."""
        op = job.operation_id
        try:
            queued = self.store.queue_write(op, ConfirmStart(self.incarnation_id, started_at))
        except RuntimeError:  # the store's thread is gone: nothing can be written
            log.exception("start confirmation of %s not queued", op)
            return
        job.confirmation = queued
        queued.landed.add_done_callback(lambda landed: self._confirmed(op, landed))

    def _confirmed(self, operation_id: str, landed: asyncio.Future[OperationRow | None]) -> None:
        if landed.cancelled():
            return
        error = landed.exception()
        if error is not None:
            log.error("start confirmation of %s not saved: %s", operation_id, error)
        elif landed.result() is None:
            log.debug("start confirmation of %s withdrawn: its settlement records it", operation_id)
        else:
            log.info("operation %s started (incarnation %s)", operation_id, self.incarnation_id)

    def _withdraw_confirm_start(self, job: Job) -> None:
        if job.confirmation is not None:
            job.confirmation.withdraw()  # taken up already: it lands before the settlement

    # --- limits and stops (R6) -----------------------------------------------------------

    async def _wait_with_limits(self, job: Job, handle: ExecutionHandle) -> ExecutionOutcome:
        watchdog = asyncio.create_task(self._watch_limits(job))
        try:
            return await handle.wait()
        finally:
            watchdog.cancel()

    async def _watch_limits(self, job: Job) -> None:
        """Sleep until each alarm the machine arms, then tell it the time."""
        while (alarm := job.limit_alarm) is not None:
            job.limit_alarm = None
            await asyncio.sleep(max(0.0, alarm - self._clock()))
            fired = LimitTimerFired(now=self._clock(), last_heartbeat=job.last_heartbeat)
            async with self.lock(job.operation_id):
                commands = self._step(job, fired)
                await self._perform(job, (c for c in commands if not isinstance(c, StopExecutor)))
            # Asked outside the lock, as ever: a Cancel need not wait behind it.
            await self._perform(job, (c for c in commands if isinstance(c, StopExecutor)))

    async def _write_stop_reason(self, job: Job, reason: StopReason) -> None:
        log.info(
            "operation %s stop reason %s (incarnation %s)",
            job.operation_id,
            reason,
            self.incarnation_id,
        )
        try:
            await self.store.write(job.operation_id, RecordStopReason(reason))
        except (StoreError, IllegalRowEvent) as exc:
            log.warning("stop reason of %s kept in memory only: %s", job.operation_id, exc)
            return

    # --- settlement (R7) ------------------------------------------------------------------

    async def _write_settlement(self, job: Job, command: WriteSettlement) -> JobEvent:
        decision, execution = command.decision, command.execution
        change = Settle(
            self.incarnation_id,
            decision.state,
            execution,
            self._clock(),
            result=decision.result,
            error=decision.error,
            started_at=command.started_at,
            current_execution=command.current_execution,
            # The execution is over: its stream closes, its length goes on the row.
            output_chunks=self.output.close(job.operation_id),
        )
        try:
            with tracing.span("turnwire.runner.settle", job.operation_id, state=decision.state):
                await self.store.write(job.operation_id, change)
        except (StoreError, IllegalRowEvent) as exc:
            log.error(
                "settlement of %s as %s NOT saved (incarnation %s): %s; slot held until restart",
                job.operation_id,
                decision.state,
                self.incarnation_id,
                exc,
            )
            return SettlementWriteFailed()
        log.info(
            "operation %s settled %s execution %s (incarnation %s)",
            job.operation_id,
            decision.state,
            execution,
            self.incarnation_id,
        )
        return SettlementWritten()

    # --- shutdown (R8) -------------------------------------------------------------------

    async def drain(self, drain_seconds: float) -> None:
        """Record SHUTDOWN where no reason exists, wait, then cancel, then give up."""
        for job in list(self.jobs.values()):
            with self._turn(job):
                async with self.lock(job.operation_id):
                    await self._feed(job, DrainStarted())
        if await wait_all(self.jobs, drain_seconds):
            return
        log.warning("drain deadline passed: cancelling %d jobs", len(pending(self.jobs)))
        for job in pending(self.jobs):
            with self._turn(job):
                await self._feed(job, DrainDeadlinePassed())
        if await wait_all(self.jobs, self._grace + 1.0):
            return
        for job in pending(self.jobs):
            with self._turn(job):
                log.error(
                    "operation %s did not settle; abandoning (it will read INTERRUPTED)",
                    job.operation_id,
                )
            if job.task is not None:
                job.task.cancel()
        await wait_all(self.jobs, 1.0)


def _waits_to_retry(job: Job) -> bool:
    return job.state.phase is Phase.BACKOFF


def _detail(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
