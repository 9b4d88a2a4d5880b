"""The life of one admitted turn: launch check, two-step launch, limits, settlement.

A job is made by a successful admission (it holds one slot) and ends when its
settlement is durable, which is the only moment its slot is freed (R6, R7).
The per-operation lock (shared with the service's Dispatch/Cancel) makes the
launch check and the launch intent one step with respect to a Cancel.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from runner_svc.core.admission import SlotPools
from runner_svc.core.model import Execution, RowState, SlotKind, StopReason, TurnFailure
from runner_svc.core.settlement import (
    ReportedOutcome,
    SettlementDecision,
    decide_settlement,
    due_stop_reason,
    first_stop_reason,
    launch_block,
    unlaunched_settlement,
)
from runner_svc.core.transitions import (
    ConfirmStart,
    IllegalRowEvent,
    LaunchIntent,
    RecordStopReason,
    Settle,
)
from runner_svc.executors import (
    ExecutionHandle,
    ExecutionOutcome,
    ExecutionRequest,
    Executor,
    ExecutorProcess,
    ExecutorStartError,
)
from runner_svc.storage.async_store import AsyncRunnerStore
from runner_svc.storage.sqlite_store import StoreError
from turnwire.crashpoints import crash_point
from turnwire.errors import REASONS
from turnwire.runner.v1 import runner_pb2

log = logging.getLogger("runner_svc.jobs")

_LOCK_STRIPES = 256


@dataclass
class Job:
    """One admitted operation while it holds a slot."""

    operation_id: str
    kind: SlotKind
    attempt: int
    envelope: runner_pb2.TurnEnvelope
    envelope_bytes: bytes
    stop_reason: StopReason | None = None
    handle: ExecutionHandle | None = None
    started_at: float | None = None
    slot_held: bool = True
    result_not_saved: bool = False
    task: asyncio.Task[None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def deadline(self) -> float | None:
        limits = self.envelope.limits
        if not limits.HasField("deadline"):
            return None
        return limits.deadline.seconds + limits.deadline.nanos / 1e9

    def budget_seconds(self) -> float | None:
        budget_ms = self.envelope.limits.budget_ms
        return budget_ms / 1000.0 if budget_ms else None


class JobRunner:
    """Launches, stops and settles jobs; owns the slot pools and the job table."""

    def __init__(
        self,
        store: AsyncRunnerStore,
        executor: Executor,
        pools: SlotPools,
        *,
        cancel_grace_seconds: float,
        on_change: Callable[[], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.executor = executor
        self.pools = pools
        self.incarnation_id = store.incarnation_id
        self.jobs: dict[str, Job] = {}
        self._grace = cancel_grace_seconds
        self._on_change = on_change
        self._clock = clock
        self._locks = [asyncio.Lock() for _ in range(_LOCK_STRIPES)]

    def lock(self, operation_id: str) -> asyncio.Lock:
        """The lock serializing every decision about one operation (striped, bounded)."""
        return self._locks[hash(operation_id) % _LOCK_STRIPES]

    def held_result_not_saved(self) -> int:
        return sum(1 for job in self.jobs.values() if job.result_not_saved)

    def start(self, job: Job) -> None:
        """Register an admitted job and launch it in the background (after the reply)."""
        self.jobs[job.operation_id] = job
        job.task = asyncio.create_task(self._run(job), name=f"job-{job.operation_id}")

    async def _run(self, job: Job) -> None:
        try:
            handle = await self._launch(job)
            if handle is None:
                return
            outcome = await self._wait_with_limits(job, handle)
            crash_point("runner.after_executor_finished")
            decision = decide_settlement(job.stop_reason, _reported(outcome), REASONS)
            async with self.lock(job.operation_id):
                await self.write_settlement(job, decision, Execution.STARTED)
        except Exception:
            # Fail closed: the slot stays held and the row says what is durable.
            job.result_not_saved = True
            log.exception("job %s crashed; slot held until restart", job.operation_id)
        finally:
            job.done.set()

    # --- launch (R3) ----------------------------------------------------------

    async def _launch(self, job: Job) -> ExecutionHandle | None:
        op = job.operation_id
        async with self.lock(op):
            try:
                row = await self.store.get(op)
            except StoreError:
                job.result_not_saved = True
                log.exception("launch check of %s could not read the store; slot held", op)
                return None
            due = due_stop_reason(
                now=self._clock(), deadline=job.deadline(), started_at=None, budget_seconds=None
            )
            if due is not None:
                job.stop_reason = first_stop_reason(job.stop_reason, due)
            block = launch_block(row, self.incarnation_id, job.stop_reason)
            if block:
                log.info("operation %s not launched: %s", op, block)
                reason = job.stop_reason or (row.stop_reason if row is not None else None)
                if row is not None and row.state is RowState.ACCEPTED and reason is not None:
                    decision = unlaunched_settlement(reason)
                    await self.write_settlement(job, decision, Execution.NOT_STARTED)
                else:  # nothing of ours was launched: the slot is free again
                    self.free_slot(job)
                return None
            return await self._launch_locked(job)

    async def _launch_locked(self, job: Job) -> ExecutionHandle | None:
        op = job.operation_id
        try:
            await self.store.write(op, LaunchIntent(self.incarnation_id))
        except (StoreError, IllegalRowEvent):
            job.result_not_saved = True
            log.exception("launch intent of %s not saved; not launched, slot held", op)
            return None
        crash_point("runner.after_launch_intent")
        request = ExecutionRequest(
            op, self.incarnation_id, job.attempt, job.envelope, job.envelope_bytes
        )
        try:
            handle = await self.executor.start(request)
        except ExecutorStartError as exc:
            log.warning("executor refused to start %s: %s", op, exc)
            failed = SettlementDecision(
                RowState.FAILED, error=_failure("EXECUTOR_UNAVAILABLE", exc)
            )
            await self.write_settlement(job, failed, Execution.NOT_STARTED)
            return None
        except Exception as exc:
            log.exception("executor start of %s failed oddly: it may have started", op)
            failed = SettlementDecision(
                RowState.FAILED, error=_failure("EXECUTOR_UNAVAILABLE", exc)
            )
            await self.write_settlement(job, failed, Execution.UNKNOWN)
            return None
        job.handle = handle
        job.started_at = self._clock()
        await self._record_process(job, handle)
        await self._confirm_start(job)
        if job.stop_reason is not None:  # a stop came while the executor was starting
            await handle.cancel(self._grace)
        return handle

    async def _record_process(self, job: Job, handle: ExecutionHandle) -> None:
        """R10: write down the executor's process group, so the next incarnation
        can end it if this one dies first (runner_svc/executor_sweep.py)."""
        process = getattr(handle, "process", None)
        if not isinstance(process, ExecutorProcess):
            return
        try:
            await self.store.record_executor_process(
                job.operation_id,
                process.pgid,
                process.start_time,
                process.boot_id,
                job.started_at or self._clock(),
            )
        except StoreError as exc:
            # The death signal and the watchdog still end it with this runner.
            log.error(
                "process group %d of %s not recorded: a restart cannot end it: %s",
                process.pgid,
                job.operation_id,
                exc,
            )

    async def _confirm_start(self, job: Job) -> None:
        assert job.started_at is not None
        try:
            await self.store.write(
                job.operation_id, ConfirmStart(self.incarnation_id, job.started_at)
            )
        except (StoreError, IllegalRowEvent):
            # The row stays LAUNCHING: after a crash it says UNKNOWN, which is true.
            log.exception("start confirmation of %s not saved", job.operation_id)
            return
        log.info("operation %s started (incarnation %s)", job.operation_id, self.incarnation_id)
        self._on_change()

    # --- limits and stops (R6) -------------------------------------------------

    async def _wait_with_limits(self, job: Job, handle: ExecutionHandle) -> ExecutionOutcome:
        watchdog = asyncio.create_task(self._watch_limits(job))
        try:
            return await handle.wait()
        finally:
            watchdog.cancel()

    async def _watch_limits(self, job: Job) -> None:
        budget = job.budget_seconds()
        ends = [t for t in (job.deadline(), _plus(job.started_at, budget)) if t is not None]
        for _ in range(len(ends)):  # at most one wake-up per limit
            await asyncio.sleep(max(0.0, min(ends) - self._clock()))
            due = due_stop_reason(
                now=self._clock(),
                deadline=job.deadline(),
                started_at=job.started_at,
                budget_seconds=budget,
            )
            if due is not None:
                async with self.lock(job.operation_id):
                    await self.record_stop(job, due)
                await self.ask_to_stop(job)
                return
            ends.remove(min(ends))

    async def record_stop(self, job: Job, reason: StopReason) -> None:
        """Keep the first stop reason in memory and, when possible, durably (R6).

        The caller holds the operation's lock.
        """
        if job.stop_reason is not None:
            return
        job.stop_reason = reason
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
        self._on_change()

    async def ask_to_stop(self, job: Job) -> None:
        if job.handle is not None and not job.done.is_set():
            await job.handle.cancel(self._grace)

    # --- settlement (R7) --------------------------------------------------------

    async def write_settlement(
        self, job: Job, decision: SettlementDecision, execution: Execution
    ) -> bool:
        """Write the terminal state once; free the slot only if it is durable.

        The caller holds the operation's lock.
        """
        change = Settle(
            self.incarnation_id,
            decision.state,
            execution,
            self._clock(),
            result=decision.result,
            error=decision.error,
        )
        try:
            await self.store.write(job.operation_id, change)
        except (StoreError, IllegalRowEvent) as exc:
            job.result_not_saved = True
            log.error(
                "settlement of %s as %s NOT saved (incarnation %s): %s; slot held until restart",
                job.operation_id,
                decision.state,
                self.incarnation_id,
                exc,
            )
            return False
        log.info(
            "operation %s settled %s execution %s (incarnation %s)",
            job.operation_id,
            decision.state,
            execution,
            self.incarnation_id,
        )
        self.free_slot(job)
        self._on_change()
        return True

    def free_slot(self, job: Job) -> None:
        """Give the slot back once (the executor has settled, or never started)."""
        if job.slot_held:
            job.slot_held = False
            self.pools.free(job.kind)
        if self.jobs.get(job.operation_id) is job:
            del self.jobs[job.operation_id]

    # --- shutdown (R8) ------------------------------------------------------------

    async def drain(self, drain_seconds: float) -> None:
        """Record SHUTDOWN where no reason exists, wait, then cancel, then give up."""
        for job in list(self.jobs.values()):
            async with self.lock(job.operation_id):
                await self.record_stop(job, StopReason.SHUTDOWN)
        if await self._wait_all(drain_seconds):
            return
        log.warning("drain deadline passed: cancelling %d jobs", len(self._pending()))
        for job in self._pending():
            await self.ask_to_stop(job)
        if await self._wait_all(self._grace + 1.0):
            return
        for job in self._pending():
            log.error(
                "operation %s did not settle; abandoning (it will read INTERRUPTED)",
                job.operation_id,
            )
            if job.task is not None:
                job.task.cancel()
        await self._wait_all(1.0)

    def _pending(self) -> list[Job]:
        return [job for job in self.jobs.values() if not job.done.is_set()]

    async def _wait_all(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while pending := self._pending():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            waits = [asyncio.ensure_future(job.done.wait()) for job in pending]
            _, not_done = await asyncio.wait(waits, timeout=remaining)
            for waiter in not_done:
                waiter.cancel()
        return True


def _plus(start: float | None, seconds: float | None) -> float | None:
    return start + seconds if start is not None and seconds is not None else None


def _failure(reason: str, exc: BaseException) -> TurnFailure:
    return TurnFailure(reason, str(exc) or type(exc).__name__)


def _reported(outcome: object) -> ReportedOutcome:
    """Copy the outcome's fields without trusting its type (R7 validates them)."""
    missing = object()
    succeeded = getattr(outcome, "succeeded", missing)
    return ReportedOutcome(
        succeeded=None if succeeded is missing else succeeded,
        output=getattr(outcome, "output", b""),
        content_type=getattr(outcome, "content_type", ""),
        error_reason=getattr(outcome, "error_reason", ""),
        error_message=getattr(outcome, "error_message", ""),
        metadata=getattr(outcome, "metadata", {}),
    )
