"""The runner shell: Dispatch, Cancel, Release, status, watch and shutdown.

Each call follows load -> decide (pure core) -> persist -> perform, under the
operation's lock. Refusals are :class:`RunnerRefusal` with a typed reason; the
transport maps them to gRPC codes in one table. Nothing here speaks gRPC.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

from runner_svc import turn_limits
from runner_svc.core.admission import (
    Admission,
    AdmissionAction,
    DispatchFacts,
    SlotPools,
    check_incarnation,
    decide_admission,
)
from runner_svc.core.model import (
    DEFAULT_EXECUTOR,
    OperationRow,
    Refusal,
    RowState,
    RunnerRefusal,
    SlotKind,
)
from runner_svc.core.requests import admission_change, plan_cancel, plan_release
from runner_svc.core.retention import pruned_refusal
from runner_svc.core.settlement import reported_row
from runner_svc.core.transitions import (
    IllegalRowEvent,
    RaiseFencingToken,
    RowEvent,
)
from runner_svc.envelope_check import KINDS, require_id, verified_envelope
from runner_svc.executors import Executor
from runner_svc.executors.registry import ExecutorSet
from runner_svc.floor_keeper import FloorKeeper
from runner_svc.jobs import JobRunner
from runner_svc.output_streams import OutputHub
from runner_svc.service_output import OutputItem, stream_output
from runner_svc.service_releases import CarriedReleases
from runner_svc.service_types import (
    MAX_REPLY_HOLD_SECONDS,
    STORE_UNREADABLE,
    STORE_UNWRITTEN,
    CancelOutcome,
    DispatchCall,
    DispatchOutcome,
    OperationView,
    PoolUse,
    RunnerInfo,
    ServiceSettings,
)
from runner_svc.service_watch import watch_changes
from runner_svc.storage.async_store import AsyncRunnerStore
from runner_svc.storage.sqlite_store import StoreError
from turnwire.crashpoints import crash_point
from turnwire.distribution import version as installed_version
from turnwire.observability.logs import note_turn
from turnwire.runner.v1 import runner_pb2

# The values are defined in service_types; importing them from here still works.
__all__ = [
    "MAX_REPLY_HOLD_SECONDS",
    "CancelOutcome",
    "DispatchCall",
    "DispatchOutcome",
    "OperationView",
    "PoolUse",
    "RunnerInfo",
    "RunnerService",
    "ServiceSettings",
]

log = logging.getLogger("runner_svc.service")

# What GetRunnerInfo reports: the installed distribution's version (coordinators
# give turns only to runners within one minor version of theirs).
VERSION = installed_version()


class RunnerService:
    def __init__(
        self,
        store: AsyncRunnerStore,
        executors: ExecutorSet | Executor,
        settings: ServiceSettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        # One executor alone is the default (R14); several come by name.
        self.executors = (
            executors if isinstance(executors, ExecutorSet) else ExecutorSet.single(executors)
        )
        self.output = OutputHub(
            settings.stream_limits, keep_seconds=settings.stream_keep_seconds, clock=clock
        )
        self.incarnation_id = store.incarnation_id
        self.settings = settings
        self.accepting = True
        self.started_at = clock()
        self._clock = clock
        self._pools = SlotPools(
            {
                SlotKind.WRITABLE: settings.writable_slots,
                SlotKind.READ_ONLY: settings.read_only_slots,
            }
        )
        self.jobs = JobRunner(
            store,
            self.executors,
            self._pools,
            self.output,
            cancel_grace_seconds=settings.cancel_grace_seconds,
            clock=clock,
        )
        self._closing = False
        # Operations whose Dispatch reply is being held (issue 10), with how many
        # calls hold it: the watch streams leave their changes out meanwhile.
        self._holding: dict[str, int] = {}
        # Carried releases still being applied (ended before the store closes).
        self._carried = CarriedReleases(self.release)
        self.floor = FloorKeeper(
            store,
            window_seconds=settings.admission_window_seconds,
            interval_seconds=settings.floor_interval_seconds,
            accepting=lambda: self.accepting,
            clock=clock,
        )

    # --- Dispatch (R2, R3, R4, §6) ----------------------------------------------

    async def dispatch(self, call: DispatchCall) -> DispatchOutcome:
        if call.releases:
            self._carried.apply_later(call.releases)
        hold = min(max(call.reply_hold_seconds, 0.0), MAX_REPLY_HOLD_SECONDS)
        if hold <= 0:
            return await self._admitted(call)
        # Issue 10: a turn that settles within the hold is answered with its
        # settled row, so the coordinator records the result from the reply. The
        # watch streams leave the operation out meanwhile (the reply carries its
        # latest row: read after the hold ends, so nothing left out is lost).
        op = call.operation_id
        self._holding[op] = self._holding.get(op, 0) + 1
        try:
            with self.store.awaiting_settlement(op) as settled:
                outcome = await self._admitted(call)
                if outcome.duplicate or outcome.view.row.settled:
                    return outcome
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(hold):
                        await settled.wait()
        finally:
            left = self._holding[op] - 1
            if left:
                self._holding[op] = left
            else:
                del self._holding[op]
        row = await self._read(op)
        return outcome if row is None else DispatchOutcome(self._view(row), duplicate=False)

    async def _admitted(self, call: DispatchCall) -> DispatchOutcome:
        # A caller that gives up (deadline, reset) cancels this handler. The
        # admission must still finish as one unit: a row committed without its
        # job would stay ACCEPTED (or LAUNCHING, never started) on this
        # incarnation forever and hold a slot.
        return await asyncio.shield(self._dispatch(call))

    async def _dispatch(self, call: DispatchCall) -> DispatchOutcome:
        envelope = verified_envelope(call)
        note_turn(call.operation_id, principal=envelope.principal)  # for the log lines
        facts = DispatchFacts(
            call.operation_id,
            call.envelope_digest,
            call.expected_incarnation_id,
            call.fencing_token,
            KINDS[envelope.kind],
            envelope.executor or DEFAULT_EXECUTOR,
            turn_limits.deadline(envelope),
        )
        async with self.jobs.lock(call.operation_id):
            row = self.store.remembered(call.operation_id)
            admitted = None if row is not None else await self._admit_if_new(call, facts, envelope)
            action = AdmissionAction.ADMIT
            if admitted is None:
                row = row or await self._read(call.operation_id)
                admission = self._decide(facts, row)
                if admission.action is AdmissionAction.DUPLICATE:
                    assert row is not None
                    return await self._duplicate(call, row, admission.raise_fencing_token)
                admitted = await self._admit(call, facts, row, envelope, admission)
                action = admission.action
            assert admitted is not None  # only a guess at a new id comes back empty
        log.info(
            "dispatch %s accepted (incarnation %s, kind %s, attempt %d, %s, row %s)",
            call.operation_id,
            self.incarnation_id,
            facts.kind,
            call.attempt,
            action.value,
            admitted.state,
        )
        return DispatchOutcome(self._view(admitted), duplicate=False)

    def _decide(self, facts: DispatchFacts, row: OperationRow | None) -> Admission:
        return decide_admission(
            facts,
            row,
            incarnation_id=self.incarnation_id,
            accepting=self.accepting,
            pools=self._pools,
            now=self._clock(),
            openings=self.store.openings,
            executors=self.executors.names,
        )

    async def _admit_if_new(
        self, call: DispatchCall, facts: DispatchFacts, envelope: runner_pb2.TurnEnvelope
    ) -> OperationRow | None:
        """Issue 10: an id memory does not hold is almost always new, so it is admitted
        with no read first: one trip to the store's thread instead of two, in the
        same transaction as the Releases the Dispatch carries. If the store knows the
        id after all, the Admit is refused there (nothing written) and None says:
        read the row and decide as always. A refusal as new (full, draining) is not
        final either: the row may make it a duplicate, which is answered even then."""
        try:
            admission = self._decide(facts, None)
        except RunnerRefusal:
            return None
        return await self._admit(call, facts, None, envelope, admission, guessed_new=True)

    async def _duplicate(
        self, call: DispatchCall, row: OperationRow, raise_token: bool
    ) -> DispatchOutcome:
        """R2: a known id never starts again; the reply is its current status."""
        if raise_token:
            row = await self._write(call.operation_id, RaiseFencingToken(call.fencing_token))
        log.info(
            "dispatch %s duplicate (incarnation %s): %s",
            call.operation_id,
            self.incarnation_id,
            row.state,
        )
        return DispatchOutcome(self._view(row), duplicate=True)

    async def _admit(
        self,
        call: DispatchCall,
        facts: DispatchFacts,
        row: OperationRow | None,
        envelope: runner_pb2.TurnEnvelope,
        admission: Admission,
        *,
        guessed_new: bool = False,
    ) -> OperationRow | None:
        """R4: reserve (no await since the decision), write the row (with its launch
        intent when ``admission`` says it launches at once, R3), launch in the
        background. ``guessed_new``: ``row`` is None only because memory did not hold
        the id; if the store has it, nothing is written and None comes back."""
        self._pools.reserve(facts.kind)
        try:
            change = self._admission_change(call, facts, row, admission.with_intent)
            if guessed_new:
                try:
                    written = await self.store.write(call.operation_id, change)
                except IllegalRowEvent:
                    written = None  # known after all
                except StoreError as exc:
                    raise self._unwritten(call.operation_id, change, exc) from exc
            else:
                written = await self._write(call.operation_id, change)
        except BaseException:
            # ANY failure, typed or not: no job was started, so nothing holds
            # the slot (an unexpected one used to leak it until restart).
            self._pools.free(facts.kind)
            raise
        if written is None:
            self._pools.free(facts.kind)
            return None
        row = written
        crash_point("runner.after_dedupe_commit")
        self.jobs.admit(
            call.operation_id,
            facts.kind,
            call.attempt,
            envelope,
            call.envelope,
            # Shutdown began while the row was being written: never started (R8).
            draining=not self.accepting,
            with_intent=admission.with_intent,
        )
        return row

    def _admission_change(
        self, call: DispatchCall, facts: DispatchFacts, row: OperationRow | None, with_intent: bool
    ) -> RowEvent:
        return admission_change(
            facts,
            row,
            incarnation_id=self.incarnation_id,
            attempt=call.attempt,
            dispatch_stamp=call.dispatch_stamp,
            now=self._clock(),
            with_intent=with_intent,
        )

    # --- Cancel (R5, R6) ------------------------------------------------------------

    async def cancel(
        self, operation_id: str, expected_incarnation_id: str, token: int
    ) -> CancelOutcome:
        # Like Dispatch: a stop reason written must also reach the job, even if
        # the caller gave up meanwhile.
        return await asyncio.shield(self._cancel(operation_id, expected_incarnation_id, token))

    async def _cancel(
        self, operation_id: str, expected_incarnation_id: str, token: int
    ) -> CancelOutcome:
        require_id(operation_id)
        check_incarnation(expected_incarnation_id, self.incarnation_id)
        async with self.jobs.lock(operation_id):
            row = await self._read(operation_id)
            job = self.jobs.jobs.get(operation_id)
            plan = plan_cancel(
                row,
                operation_id=operation_id,
                token=token,
                incarnation_id=self.incarnation_id,
                has_job=job is not None,
                now=self._clock(),
            )
            for change in plan.writes:
                row = await self._write(operation_id, change)
            assert row is not None  # plan_cancel tombstones an unknown id
            if plan.tell_job and job is not None:
                # Our jobs decide for themselves (R6, runner_svc.jobs).
                await self.jobs.cancel(job, row)
                row = await self._read(operation_id) or row
        log.info(
            "cancel %s: %s, now %s (incarnation %s)",
            operation_id,
            plan.outcome,
            row.state,
            self.incarnation_id,
        )
        return CancelOutcome(self._view(row), tombstoned=row.state is RowState.TOMBSTONED)

    # --- Release (R9) ------------------------------------------------------------

    async def release(self, operation_id: str, expected_incarnation_id: str, token: int) -> bool:
        require_id(operation_id)
        check_incarnation(expected_incarnation_id, self.incarnation_id)
        async with self.jobs.lock(operation_id):
            released, change = plan_release(await self._read(operation_id), token)
            if change is not None:
                await self._write(operation_id, change)
                log.info("release %s (incarnation %s)", operation_id, self.incarnation_id)
        return released

    # --- status, info, watch ---------------------------------------------------------

    async def status(self, operation_id: str) -> OperationView | None:
        require_id(operation_id)
        row = await self._read(operation_id)
        if row is None and await self._pruned([operation_id]):
            raise pruned_refusal(operation_id)  # §9 K3: never "absent"
        return self._view(row) if row is not None else None

    async def batch_status(
        self, operation_ids: list[str]
    ) -> list[tuple[str, OperationView | None]]:
        for operation_id in operation_ids:
            require_id(operation_id)
        try:
            rows = await self.store.get_many(operation_ids)
        except StoreError as exc:
            log.error("store read failed for a batch of %d: %s", len(operation_ids), exc)
            raise RunnerRefusal(Refusal.STORE_UNAVAILABLE, STORE_UNREADABLE) from exc
        missing = [op for op in operation_ids if op not in rows]
        pruned = await self._pruned(missing) if missing else set()
        # §9 K3: a pruned id gets no entry at all (neither present nor absent); the
        # coordinator reads a missing entry as no answer for that operation alone.
        return [
            (op, self._view(rows[op]) if op in rows else None)
            for op in operation_ids
            if op not in pruned
        ]

    async def _pruned(self, operation_ids: list[str]) -> set[str]:
        try:
            return await self.store.pruned_among(operation_ids)
        except StoreError as exc:
            log.error("store read failed for pruned keys: %s", exc)
            raise RunnerRefusal(Refusal.STORE_UNAVAILABLE, STORE_UNREADABLE) from exc

    def pool_use(self) -> tuple[PoolUse, ...]:
        """Each slot pool's size and use now (GetRunnerInfo, every watch message)."""
        return tuple(
            PoolUse(kind, self._pools.sizes[kind], self._pools.in_use[kind]) for kind in SlotKind
        )

    def info(self) -> RunnerInfo:
        return RunnerInfo(
            self.incarnation_id,
            self.store.store_id,
            self.store.durable,
            self.pool_use(),
            self.accepting,
            self.started_at,
            self.jobs.held_result_not_saved(),
            VERSION,
            self.store.openings,
            tuple(self.executors.kinds()),
        )

    def watch(self, after_sequence: int) -> AsyncIterator[OperationView | None]:
        """Every row change after the cursor, then live ones; None is a heartbeat
        (runner_svc.service_watch)."""
        return watch_changes(
            self.store,
            after_sequence,
            buffer=self.settings.watch_buffer,
            heartbeat_seconds=self.settings.heartbeat_seconds,
            sends=self._watch_sends,
            view=self._view,
            closing=lambda: self._closing,
        )

    def stream_output(self, operation_id: str, after_offset: int) -> AsyncIterator[OutputItem]:
        """One operation's output from an offset (R13; runner_svc.service_output)."""
        require_id(operation_id)
        return stream_output(
            self.output,
            operation_id,
            after_offset,
            read_row=self._read,
            pruned=self._is_pruned,
            view=self._view,
            closing=lambda: self._closing,
        )

    async def _is_pruned(self, operation_id: str) -> bool:
        return bool(await self._pruned([operation_id]))

    def _watch_sends(self, row: OperationRow) -> bool:
        """Whether a watch sends this row: not while a held Dispatch reply will carry
        it (dispatch()), and not once released (only the coordinator that recorded
        the turn's end releases it, C10: it has nothing to learn from the release)."""
        return row.operation_id not in self._holding and not row.released

    # --- shutdown (R8) -------------------------------------------------------------

    def stop_admission(self) -> None:
        if self.accepting:
            self.accepting = False
            log.info("incarnation %s: admission closed, draining", self.incarnation_id)

    async def drain(self, drain_seconds: float) -> None:
        self.stop_admission()
        await self.jobs.drain(drain_seconds)

    def end_watches(self) -> None:
        self._closing = True
        self.store.wake_watchers()
        self.output.stop()

    def start_floor_keeper(self) -> None:
        """Start raising the admission floor (§6.1; the serving runner does)."""
        self.floor.start()

    async def close(self) -> None:
        self.end_watches()
        await self._carried.close()
        await self.floor.stop_and_seal()
        await self.store.close()
        log.info("incarnation %s: store closed", self.incarnation_id)

    # --- store access with typed refusals ------------------------------------------

    async def _read(self, operation_id: str) -> OperationRow | None:
        try:
            return await self.store.get(operation_id)
        except StoreError as exc:
            log.error("store read failed for %s: %s", operation_id, exc)
            raise RunnerRefusal(Refusal.STORE_UNAVAILABLE, STORE_UNREADABLE) from exc

    async def _write(self, operation_id: str, change: RowEvent) -> OperationRow:
        try:
            row = await self.store.write(operation_id, change)
        except (StoreError, IllegalRowEvent) as exc:
            raise self._unwritten(operation_id, change, exc) from exc
        return row

    @staticmethod
    def _unwritten(operation_id: str, change: RowEvent, exc: Exception) -> RunnerRefusal:
        log.error("store write failed for %s (%s): %s", operation_id, type(change).__name__, exc)
        return RunnerRefusal(Refusal.STORE_WRITE_FAILED, STORE_UNWRITTEN)

    def _view(self, row: OperationRow) -> OperationView:
        job = self.jobs.jobs.get(row.operation_id)
        return OperationView(
            reported_row(row, self.incarnation_id),
            result_not_saved=job is not None and job.result_not_saved,
        )
