"""The dispatcher: the shell around ``core.decide`` (load -> decide -> commit
-> perform -> publish).

Theory of operation. Every change to an operation goes through
:meth:`Dispatcher._step`: under a per-operation lock it performs one step of
the driver (``coordinator_svc.driver.step``: load the record and its attempt
rows, judge who may act, ask the pure core for a Decision, commit the Change
as a compare-and-set; a stale version decides again, a lost lease sends
nothing more, §5). Only after the commit are the decision's commands
performed (persist before you send); their replies come back as events and
the loop goes on (:meth:`_drive`).

Work arrives from five places: ``store_accepted()`` / ``accepted()`` (a new
operation: one that can be sent at once has its first attempt written with
its acceptance, ``first_attempt``, PROTOCOL C1a), the
scheduler's grants (``core.scheduler`` via ``waiting_room``: a QUEUED turn
is routed only by a grant, fairest first, where a slot is free; a waiting
turn costs nothing until then), timers (backoff, ScheduleAt, time limits),
one watch stream per runner (``watching``; its reports drive in a lane of
their own, so results are recorded first), and ``request_cancel()`` from the
API. The due scan (``due_scan``) is the fallback for timers lost to a race.

Replicas (issue 12, §5): given an ``Ownership``, the engine drives only
operations whose lease it holds (``ownership``: accepted here, or adopted
from a replica whose lease lapsed, through C12's ``Restarted``), every
commit renews its row's lease, and nothing is written or sent while its
leases are not current. Without one it is the journal's only coordinator
(SQLite): no lease fields, and C12 recovery at start takes everything.

Commits per operation on the happy path: submit, DISPATCHING (write-ahead),
terminal = 3 when the turn settles within ``settle_grace`` of the Dispatch
reply (the watch's settled row ends DISPATCHING directly); a longer turn adds
the RUNNING commit = 4. The first two share one transaction when the turn is
sent at once (C1a) and the journal batches writes. Runner calls per
operation: one (batched) status call, Dispatch, Release; the watch stream
and GetRunnerInfo are per runner.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc

from coordinator_svc.config import DispatchTimings, RunnerEndpoint
from coordinator_svc.core.decision import Context, Decision
from coordinator_svc.core.events import (
    CancelRequested,
    Event,
    Tick,
)
from coordinator_svc.core.model import (
    AttemptRecord,
    EventRecord,
    OperationRecord,
    OpState,
)
from coordinator_svc.core.quotas import QuotaRefusal, Quotas
from coordinator_svc.dispatcher.calls import RunnerCalls
from coordinator_svc.dispatcher.deadlines import TurnDeadlines
from coordinator_svc.dispatcher.due_scan import DueScan
from coordinator_svc.dispatcher.first_attempt import (
    Written,
    acceptance_outcome,
    report_unwritten,
    write_together,
)
from coordinator_svc.dispatcher.fleet import Fleet
from coordinator_svc.dispatcher.metrics import DispatcherMetrics
from coordinator_svc.dispatcher.ownership import Ownership
from coordinator_svc.dispatcher.performing import CommandPerformer
from coordinator_svc.dispatcher.recovery import bound_to, recover
from coordinator_svc.dispatcher.replica import ReplicaDuties
from coordinator_svc.dispatcher.stepping import StepPerformer
from coordinator_svc.dispatcher.translate import envelope_executor
from coordinator_svc.dispatcher.visibility import describe_wait, log_transition, note_record
from coordinator_svc.dispatcher.waiting_room import WaitingRoom
from coordinator_svc.driver.agenda import Agenda
from coordinator_svc.driver.attention import due_scan_ticks, may_tick
from coordinator_svc.driver.driver import Driver, Timings
from coordinator_svc.driver.memory import Memory
from coordinator_svc.driver.step import MAX_CAS_RETRIES, NoStep, Replica, Stepped
from coordinator_svc.driver.step import step as step_machine
from coordinator_svc.feed import ChangeFeed
from coordinator_svc.ports import (
    Journal,
    JournalError,
    RunnerGateway,
    Submit,
)
from turnwire.crashpoints import crash_point
from turnwire.limits import MessageLimits
from turnwire.observability.logs import turn_context
from turnwire.transport_security import RunnerCredentials

log = logging.getLogger("coordinator_svc.dispatcher")

# Bounds on every loop (never spin forever on one operation).
MAX_STEPS_PER_DRIVE = 64
LOCK_STRIPES = 1024


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Step:
    record: OperationRecord
    decision: Decision


class Dispatcher:
    """Hands operations to runners and records what happened (C2-C14).

    ``interceptors`` wrap every runner channel (fault injection in tests).
    ``runner_credentials`` are what the runners demand (issue 11): needed
    whenever runners are configured and no ``gateways`` stand in for them.
    ``status_poll``: seconds between fallback status polls of a RUNNING or
    CANCELLING operation (default 20 x ``timings.idle_poll``); the watch
    stream normally reports first. ``settle_grace``: how long an accepted,
    unsettled Dispatch reply is held for the settled row (0 turns it off).
    ``max_concurrency`` bounds operations being driven at once.
    """

    def __init__(
        self,
        journal: Journal,
        runners: Sequence[RunnerEndpoint],
        timings: DispatchTimings,
        feed: ChangeFeed,
        *,
        clock: Callable[[], datetime] = utc_now,
        default_max_attempts: int = 5,
        interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
        status_poll: float | None = None,
        settle_grace: float | None = None,
        max_concurrency: int = 64,
        limits: MessageLimits | None = None,
        quotas: Quotas | None = None,
        queue_timeout: float | None = None,
        gateways: Mapping[str, RunnerGateway] | None = None,
        preflight_first_attempts: bool = False,
        queue_before_first_attempt: bool = False,
        runner_credentials: RunnerCredentials | None = None,
        ownership: Ownership | None = None,
    ) -> None:
        self._journal = journal
        self._ownership = ownership
        self._changes = feed
        self._clock = clock
        self.default_max_attempts = default_max_attempts
        self.metrics = DispatcherMetrics()
        self._calls = RunnerCalls(
            runners,
            timings,
            self.metrics,
            interceptors,
            settle_grace=settle_grace if settle_grace is not None else timings.settle_grace,
            limits=limits or MessageLimits(),
            credentials=runner_credentials,
            gateways=gateways,
        )
        self._performer = CommandPerformer(self._calls, self._failed, self._schedule_at)
        # Striped per-operation locks: one load-decide-commit at a time per
        # operation, without a lock object per operation ever seen.
        self._locks = [asyncio.Lock() for _ in range(LOCK_STRIPES)]
        # All this process knows of each operation beyond its record (driver.memory).
        self.memory = Memory()
        self.deadlines = TurnDeadlines(queue_timeout, self.memory)
        self._attempt_with_acceptance = not (preflight_first_attempts or queue_before_first_attempt)
        quotas = quotas or Quotas()
        self.room = WaitingRoom(runners, quotas, self.deadlines, clock, self.wake)
        self.driver = Driver(
            self.room.scheduler,
            Timings(
                timings.backoff_initial,
                timings.backoff_max,
                timings.reconcile_deadline,
                timings.dispatch_timeout,
                status_poll if status_poll is not None else timings.status_poll,
            ),
            self.memory,
            replica_id=ownership.owner if ownership is not None else "",
            lease_ttl=ownership.ttl if ownership is not None else 15.0,
        )
        self._agenda: Agenda = self.driver.agenda
        self._tasks: set[asyncio.Task[Any]] = set()
        self._limit = asyncio.Semaphore(max_concurrency)
        # Results first: runner reports get their own lane, never queued
        # behind dispatch work (issue 9).
        self._report_limit = asyncio.Semaphore(max_concurrency)
        self._due_scan = DueScan(
            journal, clock, timings.idle_poll, skip=self._looked_after, tick=self._due
        )
        self.fleet = Fleet(
            runners,
            self._calls,
            self.room,
            timings,
            wake=self.wake,
            deliver=self.deliver,
            pump=self._pump,
            spawn=self._spawn,
            bound_to=self.bound_to,
            owns=self._owns,
            identities_known=not preflight_first_attempts,
        )
        self.members = self.fleet.members
        # What the API and the operator ask of the runners (DispatchControl).
        self.has_runner_for = self.fleet.has_runner_for
        self.executor_refusal = self.fleet.executor_refusal
        self.runner_states = self.fleet.runner_states
        self.set_runners = self.fleet.set_runners
        self.watch_on = self.fleet.watch_on
        self.output_source = self.fleet.output_source
        self.can_add_runners = self.fleet.can_add_runners
        self.check_runner_address = self.fleet.check_runner_address
        self.feed = self.fleet.feed
        self._replica = (
            ReplicaDuties(ownership, clock, self.fleet.feed) if ownership is not None else None
        )
        self._stepper = StepPerformer(
            journal,
            ownership,
            self.metrics,
            committed=self._committed,
            marked=feed.publish,
            hold=self._hold_for_grant,
            adopted=self._adopted,
        )
        self._running = False

    # --- the API the service uses (coordinator_svc.api.control.DispatchControl) ---

    async def start(self) -> None:
        """C12 recovery first (a replica: its first lease; it adopts orphans as
        its keeper finds them), then the due scan and one watch per runner."""
        if self._replica is not None:
            await self._replica.ownership.start()
        else:
            await self._recover()
        self._running = True
        self._pump()
        if self._replica is not None:
            self._spawn(self._replica.keep_leases(lambda: self._running))
        self._spawn(self._due_scan.run(lambda: self._running))
        self.members.start()

    async def stop(self) -> None:
        self._running = False
        self.members.stop()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.room.close()
        await self._calls.close()
        if self._replica is not None:
            await self._replica.ownership.hand_off()

    def wake(self, operation_id: str) -> None:
        """Look at a changed operation now."""
        self._agenda.now_due(operation_id)
        self._schedule_tick(operation_id)

    def accepted(self, record: OperationRecord) -> None:
        """A just-accepted turn waits for a slot (no journal read needed)."""
        if not self._running:
            return  # start() holds every QUEUED turn it finds
        self.room.hold(record)
        self._pump()

    async def store_accepted(
        self, record: OperationRecord, event: EventRecord, submit: Submit
    ) -> tuple[OperationRecord, bool]:
        """C1's write; a turn that can be sent at once has its first attempt
        written ahead with it (issue 10, ``first_attempt``) and is driven from
        here. Returns what ``submit`` returns, the record as now stored."""
        first = None
        if self._replica is not None:
            record = self._replica.leased(record)
        if self._running and self._attempt_with_acceptance:
            self.fleet.avoid_unreachable()
            context = self._context((), record)  # reads the turn's limits (kept per turn)
            first = self.driver.first_attempt(
                record,
                self.fleet.identity_of,
                context,
                executor=envelope_executor(record.envelope),
            )
        try:
            if first is None or first.change is None:
                stored = await submit(record, event)
            else:
                # Its own task: a caller that gives up (deadline, reset) must not cut
                # the bookkeeping short once the writes are out (the slot, the drive).
                # The task runs in the turn's log context (it copies it here).
                with turn_context(record.operation_id, principal=record.principal):
                    task = asyncio.get_running_loop().create_task(
                        self._store_with_first_attempt(record, event, submit, first)
                    )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                stored = await asyncio.shield(task)
        except BaseException:
            self.deadlines.forget(record.operation_id)  # read again if it was stored after all
            raise
        if stored[1]:
            self.deadlines.forget(record.operation_id)  # a replay: this id is never stored
        return stored

    async def _store_with_first_attempt(
        self, record: OperationRecord, event: EventRecord, submit: Submit, first: Decision
    ) -> tuple[OperationRecord, bool]:
        assert first.change is not None
        op_id = record.operation_id
        written: Written = asyncio.CancelledError()
        try:
            async with self._locks[hash(op_id) % LOCK_STRIPES]:
                submitted, written = await write_together(
                    record, event, submit, self._journal.commit, first.change
                )
        finally:
            if (
                not isinstance(written, OperationRecord)
                and self.driver.grant_ended(op_id, None, self._clock()).freed
            ):
                self._pump()
        if isinstance(written, OperationRecord):
            # The attempt is durable (C4): send it, whatever the submit said.
            self.metrics.first_attempts_with_acceptance += 1
            self._committed(record, written, first)
            self._spawn(self._drive_routed(op_id, None, Step(written, first)))
        else:
            report_unwritten(op_id, submitted, written)
        return acceptance_outcome(submitted, written)

    def quota_check(self, principal: str) -> QuotaRefusal | None:
        return self.room.quota_check(principal)

    def quota_refund(self, principal: str) -> None:
        self.room.quotas.refund(principal)

    def waiting_for(self, record: OperationRecord) -> str:
        """What a non-terminal operation waits for now (PROTOCOL §8.2: visible
        with its reason), from what this process knows; "" if nothing."""
        return describe_wait(
            record,
            self.room.scheduler,
            self.runners,
            routing=self.memory.of(record.operation_id).routing,
            retry_at=self._agenda.not_before(record.operation_id),
            now=self._clock(),
            trouble=self._calls.trouble,
            watches=list(self.members.watches.values()),
        )

    async def request_cancel(self, record: OperationRecord) -> OperationRecord:
        """C11: store the cancel (first stop reason wins); act on it in the background."""
        with turn_context(record.operation_id, principal=record.principal):
            step = await self._step(record.operation_id, CancelRequested())
        if step is None:
            return record
        if step.decision.commands or step.decision.again:
            self._spawn(self._drive(record.operation_id, None, first=step))
        return step.record

    @property
    def runners(self) -> tuple[RunnerEndpoint, ...]:
        """The members now (§11 M1), by name."""
        return self.fleet.runners

    @property
    def drained(self) -> frozenset[str]:
        return self.fleet.drained

    def _owns(self, record: OperationRecord) -> bool:
        return self._replica is None or self._replica.owns(record)

    # --- the loop ---

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _schedule_tick(self, operation_id: str) -> None:
        # Before start() the due scan has not begun; it will find the operation.
        if not self._running or not may_tick(self.memory.of(operation_id)):
            return
        self.memory.update(operation_id, driving=True)
        self._spawn(self._drive(operation_id, Tick(), exclusive=True))

    def _tick_when_due(self, operation_id: str) -> None:
        if self._agenda.waiting(operation_id, self._clock()):
            return  # rescheduled meanwhile; that schedule has its own timer
        self._agenda.now_due(operation_id)
        self._schedule_tick(operation_id)

    def deliver(self, operation_id: str, event: Event) -> None:
        """An event from outside a drive (a watch report): handle it in its own
        task, in the reports' own lane (results are recorded first)."""
        self._spawn(self._drive(operation_id, event, lane=self._report_limit))

    async def _drive(
        self,
        operation_id: str,
        event: Event | None,
        *,
        first: Step | None = None,
        exclusive: bool = False,
        lane: asyncio.Semaphore | None = None,
    ) -> OperationRecord | None:
        """Step, perform, feed replies back: until nothing is left (bounded).
        Returns the record as last seen (None if never loaded)."""
        # Every line logged while driving it (here, in the runner calls, in
        # the tasks they start) names this turn (turnwire.observability.logs).
        with turn_context(operation_id):
            if first is not None:
                note_record(first.record)
            return await self._drive_steps(
                operation_id, event, first=first, exclusive=exclusive, lane=lane
            )

    async def _drive_steps(
        self,
        operation_id: str,
        event: Event | None,
        *,
        first: Step | None,
        exclusive: bool,
        lane: asyncio.Semaphore | None,
    ) -> OperationRecord | None:
        queue: collections.deque[Event] = collections.deque([event] if event else [])
        last: OperationRecord | None = first.record if first is not None else None
        try:
            async with lane or self._limit:
                step = first
                for _ in range(MAX_STEPS_PER_DRIVE):
                    if step is None:
                        if not queue:
                            break
                        step = await self._step(operation_id, queue.popleft())
                        if step is None:
                            break
                    last = step.record
                    queue.extend(await self._perform_all(step))
                    if step.decision.again:
                        queue.append(Tick())
                    step = None
        except JournalError as error:
            log.warning("%s: journal unavailable, backing off: %s", operation_id, error)
            self._backoff(operation_id)
        except Exception:  # a bug must not kill the loop silently; back off and retry
            log.exception("%s: step failed, backing off", operation_id)
            self._backoff(operation_id)
        finally:
            if exclusive:
                self.memory.update(operation_id, driving=False)
        return last

    def _backoff(self, operation_id: str) -> None:
        self._tick_at(operation_id, self._agenda.backoff(operation_id, self._clock()))

    def _tick_at(self, operation_id: str, at: datetime) -> None:
        """Tick the operation at ``at`` from memory (the due scan is the fallback)."""
        self._agenda.later(operation_id, at)
        delay = max(0.0, (at - self._clock()).total_seconds())
        asyncio.get_running_loop().call_later(delay, self._tick_when_due, operation_id)

    # --- the scheduler's grants (issue 9) ---

    def _pump(self) -> None:
        """Route every waiting turn that fits a free slot now, fairest first."""
        if not self._running:
            return  # stopping: a drive cut short must not start new ones
        self.fleet.avoid_unreachable()
        for grant in self.room.grants():
            tick = self.driver.granted(grant, self.fleet.identity_of(grant.runner))
            self._spawn(self._drive_routed(grant.operation_id, tick))

    async def _drive_routed(
        self, op_id: str, event: Event | None, first: Step | None = None
    ) -> None:
        """Drive a turn whose slot the scheduler reserved (a grant, or a first
        attempt written with its acceptance) and end the reservation after."""
        last: OperationRecord | None = None
        try:
            last = await self._drive(op_id, event, first=first)
        finally:
            ended = self.driver.grant_ended(op_id, last, self._clock())
            if ended.wait_until is not None:
                self._tick_at(op_id, ended.wait_until)
            elif ended.hold_again and last is not None:
                self.room.hold(last)
            if ended.freed or ended.hold_again:
                self._pump()

    def _context(
        self, attempts: tuple[AttemptRecord, ...], record: OperationRecord | None = None
    ) -> Context:
        limits = self.deadlines.limits(record) if record is not None else (None, None)
        return self.driver.context(attempts, limits, self._clock())

    async def _step(self, operation_id: str, event: Event) -> Step | None:
        """One driver step (``driver.step``: load, who may act, decide, commit),
        performed under the operation's lock. None if nothing was decided."""
        replica = None
        if self._replica is not None:
            replica = Replica(self._replica.ownership.owner, self._replica.ownership.current())
        machine = step_machine(
            operation_id,
            event,
            self._context_for,
            replica=replica,
            routes_by_grant=True,
            routing=self.driver.routing,
        )
        async with self._locks[hash(operation_id) % LOCK_STRIPES]:
            end = await self._stepper.run(machine)
        match end:
            case Stepped(illegal=True):
                log.error(
                    "%s: refused %s: %s", operation_id, type(event).__name__, end.decision.note
                )
            case Stepped(committed=False):
                self.metrics.count_tags(end.decision.tags)
                if end.decision.note:
                    log.debug("%s %s: %s", operation_id, end.record.state, end.decision.note)
            case NoStep.LEASES_NOT_CURRENT if self._replica is not None:
                self._replica.ownership.check_current()  # raises: the drive backs off
            case NoStep.LEASE_LOST:
                self.metrics.leases_lost += 1
                log.warning("%s: lease lost; sending nothing more", operation_id)
                self._forget(operation_id)
            case NoStep.GAVE_UP:
                log.error("%s: gave up after %d stale versions", operation_id, MAX_CAS_RETRIES)
        return Step(end.record, end.decision) if isinstance(end, Stepped) else None

    def _context_for(self, attempts: tuple[AttemptRecord, ...], record: OperationRecord) -> Context:
        return self._context(attempts, record)

    def _hold_for_grant(self, record: OperationRecord) -> str:
        """C6 (the driver's rule): hold a QUEUED turn for a grant; why it waits."""
        self.room.hold(record)
        self._pump()  # a grant for it runs after this step (it waits for the lock)
        return self.room.scheduler.wait_reason(record.operation_id) or ""

    def _adopted(self, record: OperationRecord) -> None:
        """O3: an adopted operation is counted by this process's scheduler."""
        self.room.committed(record)
        if self.driver.adopted(record):
            self._pump()

    def _committed(self, before: OperationRecord, after: OperationRecord, d: Decision) -> None:
        self.metrics.commits += 1
        self.metrics.count_tags(d.tags)
        freed = self.driver.committed(after, self._clock())
        self.room.committed(after)
        if freed:
            self._pump()
        if d.change is not None and d.change.event is not None:
            log_transition(before, after, d.change.event)
        self._changes.publish(after.operation_id)
        self._calls.committed(after.operation_id)
        if d.change is not None and d.change.new_attempt is not None:
            crash_point("coordinator.after_attempt_commit")
        if after.state.terminal and not before.state.terminal:
            crash_point("coordinator.after_terminal_commit")

    async def _perform_all(self, step: Step) -> list[Event]:
        results = await asyncio.gather(
            *(self._performer.perform(step.record, c) for c in step.decision.commands)
        )
        return [event for events in results for event in events]

    def _schedule_at(self, record: OperationRecord, at: datetime) -> None:
        """A decision's ScheduleAt: look again at ``at`` (a timer from memory when
        the journal's next_action_at would bring it back later, or never)."""
        if self._agenda.scheduled(record, at):
            self._tick_at(record.operation_id, at)

    def _failed(self, operation_id: str) -> int:
        return self._agenda.failed(operation_id)

    # --- recovery and the due scan ---

    async def _recover(self) -> None:
        """C12 (dispatcher/recovery.py)."""
        await recover(self._journal, self._step, self.room)

    def _forget(self, op_id: str) -> None:
        """Another replica drives it now: hold no slot, count nothing for it."""
        scheduler = self.room.scheduler
        scheduler.drop(op_id)
        if scheduler.unbind(op_id):
            self._pump()
        self.room.occupancy.forget(op_id)

    def _looked_after(self, record: OperationRecord, now: datetime) -> bool:
        """Not the due scan's to tick (the driver's rule: ``attention.due_scan_ticks``)."""
        op_id = record.operation_id
        return not due_scan_ticks(
            record,
            self.memory.of(op_id),
            now,
            owner=self._replica.ownership.owner if self._replica is not None else None,
            dispatching=self._calls.dispatching(op_id),
            held=self.room.scheduler.holding(op_id),
        )

    def _due(self, op_id: str) -> None:
        self._agenda.now_due(op_id)
        self._schedule_tick(op_id)

    async def bound_to(self, runner: str, states: Sequence[OpState]) -> list[OperationRecord]:
        """Non-terminal operations bound to ``runner`` (for the watch's C9 checks)."""
        return await bound_to(self._journal, runner, states)
