"""The dispatcher: the coordinator's asyncio shell around the driver and the
pure core (load -> decide -> commit -> perform -> publish).

It wires the parts and serves the API (``api.control.DispatchControl``); it
decides nothing itself. What one step does is the driver's
(``coordinator_svc.driver``: the step, the memory of each operation, grants,
commits, who looks at what and when) and the core's (the decision); the
per-operation loop that performs them with timers, locks and lanes is
``dispatcher.operations``; the runners' side (the set, the watch streams and
what they report, through one entry point ``feed``) is ``dispatcher.fleet``.

Work arrives from five places: ``store_accepted()`` / ``accepted()`` (a new
operation: one that can be sent at once has its first attempt written with
its acceptance, PROTOCOL C1a), the scheduler's grants (a QUEUED turn is
routed only by a grant, fairest first, where a slot is free; a waiting turn
costs nothing until then), timers (backoff, ScheduleAt, time limits), one
watch stream per runner (its reports drive in a lane of their own, so
results are recorded first), and ``request_cancel()`` from the API. The due
scan (``due_scan``) is the fallback for timers lost to a race.

Replicas (issue 12, §5): given an ``Ownership``, the engine drives only
operations whose lease it holds (accepted here, or adopted from a replica
whose lease lapsed, through C12's ``Restarted``), every commit renews its
row's lease, and nothing is written or sent while its leases are not
current. Without one it is the journal's only coordinator (SQLite): no lease
fields, and C12 recovery at start takes everything.

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
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

import grpc

from coordinator_svc.config import DispatchTimings, RunnerEndpoint
from coordinator_svc.core.decision import Decision
from coordinator_svc.core.events import CancelRequested
from coordinator_svc.core.model import EventRecord, OperationRecord, OpState
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
from coordinator_svc.dispatcher.operations import Operations, Step
from coordinator_svc.dispatcher.ownership import Ownership
from coordinator_svc.dispatcher.recovery import bound_to, recover
from coordinator_svc.dispatcher.replica import ReplicaDuties
from coordinator_svc.dispatcher.translate import envelope_executor
from coordinator_svc.dispatcher.visibility import describe_wait
from coordinator_svc.dispatcher.waiting_room import WaitingRoom
from coordinator_svc.driver.driver import Driver, Timings
from coordinator_svc.driver.memory import Memory
from coordinator_svc.driver.runners import Runners
from coordinator_svc.feed import ChangeFeed
from coordinator_svc.ports import Journal, RunnerGateway, Submit
from turnwire.limits import MessageLimits
from turnwire.observability.logs import turn_context
from turnwire.transport_security import RunnerCredentials

log = logging.getLogger("coordinator_svc.dispatcher")


def utc_now() -> datetime:
    return datetime.now(UTC)


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

    operations: Operations
    fleet: Fleet

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
        self._clock = clock
        self.default_max_attempts = default_max_attempts
        self.metrics = DispatcherMetrics()
        # All this process knows of each runner (driver.runners): who it is, its
        # unanswered calls, its silence.
        self.runner_memory = Runners(live_within=timings.live_within)
        self._calls = RunnerCalls(
            runners,
            timings,
            self.metrics,
            interceptors,
            settle_grace=settle_grace if settle_grace is not None else timings.settle_grace,
            limits=limits or MessageLimits(),
            credentials=runner_credentials,
            gateways=gateways,
            memory=self.runner_memory,
            clock=clock,
        )
        # All this process knows of each operation beyond its record (driver.memory).
        self.memory = Memory()
        # Cleared while start() recovers (C12): the server answers reads during
        # it, and what changes a turn (a submit's write, a cancel) waits for it.
        self._recovered = asyncio.Event()
        self._recovered.set()
        self.deadlines = TurnDeadlines(queue_timeout, self.memory)
        self._attempt_with_acceptance = not (preflight_first_attempts or queue_before_first_attempt)
        self.room = WaitingRoom(
            runners, quotas or Quotas(), self.deadlines, clock, lambda op: self.operations.wake(op)
        )
        poll = status_poll if status_poll is not None else timings.status_poll
        t = timings
        self.driver = Driver(
            self.room.scheduler,
            Timings(
                t.backoff_initial,
                t.backoff_max,
                t.reconcile_deadline,
                t.dispatch_timeout,
                poll,
                # An explicit poll (tests of the fallback itself) holds watched or not.
                status_poll if status_poll is not None else t.watched_status_poll,
            ),
            self.memory,
            replica_id=ownership.owner if ownership is not None else "",
            lease_ttl=ownership.ttl if ownership is not None else 15.0,
        )
        self.operations = Operations(
            journal,
            self.driver,
            self.room,
            self.deadlines,
            self._calls,
            feed,
            self.metrics,
            clock=clock,
            ownership=ownership,
            identity_of=lambda runner: self.fleet.identity_of(runner, clock()),
            watched=lambda runner: self.fleet.watched_incarnation(runner),
            before_grants=lambda: self.fleet.avoid_unreachable(),
            max_concurrency=max_concurrency,
        )
        ops = self.operations
        self.wake, self.deliver = ops.wake, ops.deliver
        self.fleet = Fleet(
            runners,
            self._calls,
            self.room,
            timings,
            wake=ops.wake,
            deliver=ops.deliver,
            pump=ops.pump,
            spawn=ops.spawn,
            bound_to=self.bound_to,
            owns=lambda record: ownership is None or ownership.owns(record),
            clock=clock,
            identities_known=not preflight_first_attempts,
        )
        fleet = self.fleet
        self.members, self.feed = fleet.members, fleet.feed
        # What the API and the operator ask of the runners (DispatchControl).
        self.has_runner_for, self.executor_refusal = fleet.has_runner_for, fleet.executor_refusal
        self.runner_states, self.set_runners = fleet.runner_states, fleet.set_runners
        self.watch_on, self.output_source = fleet.watch_on, fleet.output_source
        self.can_add_runners = fleet.can_add_runners
        self.check_runner_address = fleet.check_runner_address
        self._due_scan = DueScan(
            journal, clock, timings.idle_poll, skip=ops.looked_after, tick=ops.due
        )
        self._replica = (
            ReplicaDuties(ownership, clock, fleet.feed) if ownership is not None else None
        )

    @property
    def runners(self) -> tuple[RunnerEndpoint, ...]:
        """The members now (§11 M1), by name."""
        return self.fleet.runners

    @property
    def drained(self) -> frozenset[str]:
        return self.fleet.drained

    async def start(self) -> None:
        """C12 recovery first (a replica: its first lease; it adopts orphans as
        its keeper finds them), then the due scan and one watch per runner."""
        ops = self.operations
        self._recovered.clear()
        if self._replica is not None:
            await self._replica.ownership.start()
        else:
            await recover(self._journal, ops.step, self.room)  # C12
        ops.running = True
        self._recovered.set()
        ops.pump()
        if self._replica is not None:
            ops.spawn(self._replica.keep_leases(lambda: ops.running))
        ops.spawn(self._due_scan.run(lambda: ops.running))
        self.members.start()

    async def stop(self) -> None:
        self.operations.running = False
        self.members.stop()
        tasks = list(self.operations.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.room.close()
        await self._calls.close()
        if self._replica is not None:
            await self._replica.ownership.hand_off()

    # --- the API the service uses (coordinator_svc.api.control.DispatchControl) ---

    def accepted(self, record: OperationRecord) -> None:
        """A just-accepted turn waits for a slot (no journal read needed)."""
        if not self.operations.running:
            return  # start() holds every QUEUED turn it finds
        self.room.hold(record)
        self.operations.pump()

    async def store_accepted(
        self, record: OperationRecord, event: EventRecord, submit: Submit
    ) -> tuple[OperationRecord, bool]:
        """C1's write; a turn that can be sent at once has its first attempt
        written ahead with it (issue 10, ``first_attempt``) and is driven from
        here. Returns what ``submit`` returns, the record as now stored."""
        await self._recovered.wait()
        first = None
        if self._replica is not None:
            record = self._replica.leased(record)
        if self.operations.running and self._attempt_with_acceptance:
            self.fleet.avoid_unreachable()
            context = self.operations.context((), record)  # reads the turn's limits
            first = self.driver.first_attempt(
                record,
                lambda runner: self.fleet.identity_of(runner, context.now),
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
                self.operations.tasks.add(task)
                task.add_done_callback(self.operations.tasks.discard)
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
            async with self.operations.lock(op_id):
                submitted, written = await write_together(
                    record, event, submit, self._journal.commit, first.change
                )
        finally:
            if (
                not isinstance(written, OperationRecord)
                and self.driver.grant_ended(op_id, None, self._clock()).freed
            ):
                self.operations.pump()
        if isinstance(written, OperationRecord):
            # The attempt is durable (C4): send it, whatever the submit said.
            self.metrics.first_attempts_with_acceptance += 1
            ops = self.operations
            ops.committed(record, written, first)
            ops.spawn(ops.drive_routed(op_id, None, Step(written, first)))
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
            retry_at=self.driver.agenda.not_before(record.operation_id),
            now=self._clock(),
            memory=self.runner_memory,
        )

    async def request_cancel(self, record: OperationRecord) -> OperationRecord:
        """C11: store the cancel (first stop reason wins); act on it in the background."""
        await self._recovered.wait()
        with turn_context(record.operation_id, principal=record.principal):
            step = await self.operations.step(record.operation_id, CancelRequested())
        if step is None:
            return record
        if step.decision.commands or step.decision.again:
            self.operations.spawn(self.operations.drive(record.operation_id, None, first=step))
        return step.record

    async def bound_to(
        self, runner: str, states: Sequence[OpState], other_than: str | None = None
    ) -> list[OperationRecord]:
        """Non-terminal operations bound to ``runner`` (for the watch's C9 checks)."""
        return await bound_to(self._journal, runner, states, other_than)
