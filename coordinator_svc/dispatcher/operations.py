"""The per-operation loop: performs the driver's steps and the core's commands,
with timers, locks and lanes (issue 26: the engine's performing half).

Theory of operation. Every change to an operation goes through :meth:`step`:
under the operation's lock it performs one step of the driver
(``coordinator_svc.driver.step``: load the record and its attempt rows, judge
who may act, ask the pure core for a Decision, commit the Change as a
compare-and-set). Only after the commit are the decision's commands
performed (persist before you send); their replies come back as events and
the drive goes on (:meth:`drive`, bounded). What a commit, a grant or a
grant's end means for this process's memory is the driver's to say
(``Driver.committed``, ``granted``, ``grant_ended``); this module arms the
timers, takes the locks and starts the tasks it asks for, and nothing else.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from coordinator_svc.core.decision import Context, Decision
from coordinator_svc.core.events import Event, RunnerIdentity, Tick
from coordinator_svc.core.model import AttemptRecord, OperationRecord
from coordinator_svc.dispatcher.calls import RunnerCalls
from coordinator_svc.dispatcher.deadlines import TurnDeadlines
from coordinator_svc.dispatcher.metrics import DispatcherMetrics
from coordinator_svc.dispatcher.ownership import Ownership
from coordinator_svc.dispatcher.performing import CommandPerformer
from coordinator_svc.dispatcher.stepping import StepPerformer
from coordinator_svc.dispatcher.visibility import log_transition, note_record
from coordinator_svc.dispatcher.waiting_room import WaitingRoom
from coordinator_svc.driver.attention import due_scan_ticks
from coordinator_svc.driver.driver import Driver
from coordinator_svc.driver.step import MAX_CAS_RETRIES, NoStep, Replica, Stepped
from coordinator_svc.driver.step import step as step_machine
from coordinator_svc.feed import ChangeFeed
from coordinator_svc.ports import Journal, JournalError
from turnwire.crashpoints import crash_point
from turnwire.observability.logs import turn_context

log = logging.getLogger("coordinator_svc.dispatcher")

# Bounds on every loop (never spin forever on one operation).
MAX_STEPS_PER_DRIVE = 64
LOCK_STRIPES = 1024


@dataclass(frozen=True)
class Step:
    record: OperationRecord
    decision: Decision


class Operations:
    """``identity_of(runner)``: who a live watch says the runner is (C2a);
    ``watched(runner)``: the incarnation a live watch follows, C2a or not (C9a);
    ``before_grants()``: let routing avoid runners that stopped answering.
    ``max_concurrency`` bounds operations being driven at once (and, in a
    lane of their own, runner reports: results are recorded first)."""

    def __init__(
        self,
        journal: Journal,
        driver: Driver,
        room: WaitingRoom,
        deadlines: TurnDeadlines,
        calls: RunnerCalls,
        changes: ChangeFeed,
        metrics: DispatcherMetrics,
        *,
        clock: Callable[[], datetime],
        ownership: Ownership | None,
        identity_of: Callable[[str], RunnerIdentity | None],
        watched: Callable[[str], str | None],
        before_grants: Callable[[], None],
        max_concurrency: int,
    ) -> None:
        self._driver = driver
        self._agenda = driver.agenda
        self._memory = driver.memory
        self._room = room
        self._deadlines = deadlines
        self._calls = calls
        self._changes = changes
        self._metrics = metrics
        self._clock = clock
        self._ownership = ownership
        self._identity_of = identity_of
        self._watched = watched
        self._before_grants = before_grants
        self._performer = CommandPerformer(calls, self._agenda.failed, self._schedule_at)
        self._stepper = StepPerformer(
            journal,
            ownership,
            metrics,
            committed=self.committed,
            marked=changes.publish,
            hold=self._hold_for_grant,
            adopted=self._adopted,
        )
        # Striped per-operation locks: one load-decide-commit at a time per
        # operation, without a lock object per operation ever seen.
        self._locks = [asyncio.Lock() for _ in range(LOCK_STRIPES)]
        self._limit = asyncio.Semaphore(max_concurrency)
        self._report_limit = asyncio.Semaphore(max_concurrency)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.running = False

    def lock(self, operation_id: str) -> asyncio.Lock:
        """The operation's lock (one load-decide-commit at a time)."""
        return self._locks[hash(operation_id) % LOCK_STRIPES]

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    # --- what starts a drive ---

    def wake(self, operation_id: str) -> None:
        """Look at a changed operation now."""
        self._agenda.now_due(operation_id)
        self._tick(operation_id)

    def deliver(self, operation_id: str, event: Event) -> None:
        """An event from outside a drive (a watch report): handle it in its own
        task, in the reports' own lane (results are recorded first)."""
        self.spawn(self.drive(operation_id, event, lane=self._report_limit))

    def due(self, operation_id: str) -> None:
        """The due scan found it due and nothing else looks after it."""
        self.wake(operation_id)

    def looked_after(self, record: OperationRecord, now: datetime) -> bool:
        """Not the due scan's to tick (the driver's rule: ``attention.due_scan_ticks``)."""
        op_id = record.operation_id
        return not due_scan_ticks(
            record,
            self._memory.of(op_id),
            now,
            owner=self._ownership.owner if self._ownership is not None else None,
            dispatching=self._calls.dispatching(op_id),
            held=self._room.scheduler.holding(op_id),
        )

    def pump(self) -> None:
        """Route every waiting turn that fits a free slot now, fairest first."""
        if not self.running:
            return  # stopping: a drive cut short must not start new ones
        self._before_grants()
        for grant in self._room.grants():
            tick = self._driver.granted(grant, self._identity_of(grant.runner))
            self.spawn(self.drive_routed(grant.operation_id, tick))

    def _tick(self, operation_id: str) -> None:
        # Before start() the due scan has not begun; it will find the operation.
        if not self.running or not self._driver.tick_wanted(operation_id):
            return  # a drive looks at it now; a wake owed is taken when it ends
        self.spawn(self.drive(operation_id, Tick(), exclusive=True))

    def _tick_when_due(self, operation_id: str) -> None:
        if self._agenda.waiting(operation_id, self._clock()):
            return  # rescheduled meanwhile; that schedule has its own timer
        self.wake(operation_id)

    def _tick_at(self, operation_id: str, at: datetime) -> None:
        """Tick the operation at ``at`` from memory (the due scan is the fallback)."""
        self._agenda.later(operation_id, at)
        delay = max(0.0, (at - self._clock()).total_seconds())
        asyncio.get_running_loop().call_later(delay, self._tick_when_due, operation_id)

    # --- a drive ---

    async def drive_routed(
        self, op_id: str, event: Event | None, first: Step | None = None
    ) -> None:
        """Drive a turn whose slot the scheduler reserved (a grant, or a first
        attempt written with its acceptance); what its end frees is the driver's."""
        last: OperationRecord | None = None
        try:
            last = await self.drive(op_id, event, first=first)
        finally:
            ended = self._driver.grant_ended(op_id, last, self._clock())
            if ended.wait_until is not None:
                self._tick_at(op_id, ended.wait_until)
            elif ended.hold_again and last is not None:
                self._room.hold(last)
            if ended.freed or ended.hold_again:
                self.pump()

    async def drive(
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
                        step = await self.step(operation_id, queue.popleft())
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
            if exclusive and self._driver.drive_ended(operation_id):
                self.wake(operation_id)
        return last

    def _backoff(self, operation_id: str) -> None:
        self._tick_at(operation_id, self._agenda.backoff(operation_id, self._clock()))

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

    # --- a step ---

    def context(
        self, attempts: tuple[AttemptRecord, ...], record: OperationRecord | None = None
    ) -> Context:
        if record is None:
            return self._driver.context(attempts, (None, None), self._clock())
        limits = self._deadlines.limits(record)
        watched = record.runner is not None and (
            record.incarnation_id is not None
            and self._watched(record.runner) == record.incarnation_id
        )
        return self._driver.context(attempts, limits, self._clock(), watched=watched)

    async def step(self, operation_id: str, event: Event) -> Step | None:
        """One driver step (``driver.step``: load, who may act, decide, commit),
        performed under the operation's lock. None if nothing was decided."""
        own = self._ownership
        machine = step_machine(
            operation_id,
            event,
            self.context,
            replica=Replica(own.owner, own.current()) if own is not None else None,
            routes_by_grant=True,
            routing=self._driver.routing,
        )
        async with self.lock(operation_id):
            end = await self._stepper.run(machine)
        match end:
            case Stepped(illegal=True):
                log.error(
                    "%s: refused %s: %s", operation_id, type(event).__name__, end.decision.note
                )
            case Stepped(committed=False):
                self._metrics.count_tags(end.decision.tags)
                if end.decision.note:
                    log.debug("%s %s: %s", operation_id, end.record.state, end.decision.note)
            case NoStep.LEASES_NOT_CURRENT if own is not None:
                own.check_current()  # raises: the drive backs off
            case NoStep.LEASE_LOST:
                self._metrics.leases_lost += 1
                log.warning("%s: lease lost; sending nothing more", operation_id)
                self._forget(operation_id)
            case NoStep.GAVE_UP:
                log.error("%s: gave up after %d stale versions", operation_id, MAX_CAS_RETRIES)
        return Step(end.record, end.decision) if isinstance(end, Stepped) else None

    def _hold_for_grant(self, record: OperationRecord) -> str:
        """C6 (the driver's rule): hold a QUEUED turn for a grant; why it waits."""
        self._room.hold(record)
        self.pump()  # a grant for it runs after this step (it waits for the lock)
        return self._room.scheduler.wait_reason(record.operation_id) or ""

    def _adopted(self, record: OperationRecord) -> None:
        """O3: an adopted operation is counted by this process's scheduler."""
        self._room.committed(record)
        if self._driver.adopted(record):
            self.pump()

    def committed(self, before: OperationRecord, after: OperationRecord, d: Decision) -> None:
        """A commit of this process's landed: what it moves is the driver's to say."""
        self._metrics.commits += 1
        self._metrics.count_tags(d.tags)
        freed = self._driver.committed(after, self._clock())
        self._room.committed(after)
        if freed:
            self.pump()
        if d.change is not None and d.change.event is not None:
            log_transition(before, after, d.change.event)
        self._changes.publish(after.operation_id)
        self._calls.committed(after.operation_id)
        if d.change is not None and d.change.new_attempt is not None:
            crash_point("coordinator.after_attempt_commit")
        if after.state.terminal and not before.state.terminal:
            crash_point("coordinator.after_terminal_commit")

    def _forget(self, op_id: str) -> None:
        """Another replica drives it now: hold no slot, count nothing for it."""
        scheduler = self._room.scheduler
        scheduler.drop(op_id)
        if scheduler.unbind(op_id):
            self.pump()
        self._room.occupancy.forget(op_id)
