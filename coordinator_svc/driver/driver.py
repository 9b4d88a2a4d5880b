"""The driver: this process's memory of every operation, and the rules that
read and change it around each step (issue 26).

One :class:`Driver` per coordinator process holds the memory records
(``driver.memory``), the agenda that keeps their times and streaks
(``driver.agenda``) and the scheduler's slot ledger and fair queues
(``core.scheduler``). The shell tells it what happened (a grant, a commit,
a grant's end) with the time, and does what it answers (route what fits,
tick an operation then, hold it for a grant again). The asyncio engine and
the simulation both run it, so the rules they share are the ones that ship:

- **A first attempt may ride with the acceptance** (C1a): a turn the
  scheduler would grant the moment it is held, on a runner a live watch
  knows (C2a), has its write-ahead decided from the record about to be
  stored, its slot reserved as a grant's.
- **A grant routes** (C6): the turn's slot is reserved and its step is told
  so (``routing``) until the grant ends; its Tick carries the runner, the
  runner's identity when a live watch knows it (C2a) and the streak of
  fruitless tries (its backoff).
- **A grant ends** bound for real (a commit counted it) or not (a preflight
  that went nowhere, a refusal): its slot is freed. A turn still QUEUED then
  waits out its backoff, or waits for the next grant at once.
- **A commit** ends the streak, moves the times (a refusal's wait, C6a),
  drops the turn from the fair queue once it left QUEUED, forgets its time
  limits once terminal, and keeps the slot ledger in step with the journal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from coordinator_svc.core.decide import decide
from coordinator_svc.core.decision import Context, Decision
from coordinator_svc.core.events import Event, RunnerIdentity, Tick
from coordinator_svc.core.model import AttemptRecord, OperationRecord, OpState
from coordinator_svc.core.routing import DEFAULT_EXECUTOR
from coordinator_svc.core.scheduler import Grant, Scheduler
from coordinator_svc.driver.agenda import Agenda
from coordinator_svc.driver.attention import waits_for_its_time
from coordinator_svc.driver.memory import Limits, Memory

Policy = Callable[[OperationRecord, Event, Context], Decision]


@dataclass(frozen=True)
class Timings:
    """The times a decision reads (seconds; the Context's defaults)."""

    backoff_initial: float = 0.05
    backoff_max: float = 2.0
    reconcile_deadline: float = 30.0
    dispatch_timeout: float = 5.0
    status_poll: float = 5.0
    # C9a: the fallback poll of an operation a live watch follows.
    watched_status_poll: float = 300.0


@dataclass(frozen=True)
class GrantEnd:
    """What the end of a grant asks of the shell.

    ``freed``: a slot was freed, so route what fits now; ``wait_until``: the
    turn is still QUEUED and waits out its backoff, tick it then;
    ``hold_again``: still QUEUED with nothing to wait for, hold it for a
    grant now."""

    freed: bool
    wait_until: datetime | None = None
    hold_again: bool = False


class Driver:
    """``replica_id``/``lease_ttl``: this process's lease owner and its leases'
    TTL (§5; "" for the journal's only coordinator)."""

    def __init__(
        self,
        scheduler: Scheduler,
        timings: Timings,
        memory: Memory | None = None,
        *,
        replica_id: str = "",
        lease_ttl: float = 15.0,
    ) -> None:
        self.memory = memory if memory is not None else Memory()
        self.timings = timings
        self.agenda = Agenda(timings.backoff_initial, timings.backoff_max, self.memory)
        self.scheduler = scheduler
        self._replica_id = replica_id
        self._lease_ttl = lease_ttl

    def context(
        self,
        attempts: tuple[AttemptRecord, ...],
        limits: Limits,
        now: datetime,
        *,
        watched: bool = False,
    ) -> Context:
        """Everything a decision reads besides the record and the event: the
        attempt rows, the turn's limits (deadline, queue deadline), the time.
        ``watched``: a live watch stream follows the incarnation the operation
        is bound to, so its fallback status poll can wait long (C9a)."""
        t = self.timings
        return Context(
            now=now,
            attempts=attempts,
            backoff_initial=t.backoff_initial,
            backoff_max=t.backoff_max,
            reconcile_deadline=t.reconcile_deadline,
            dispatch_timeout=t.dispatch_timeout,
            status_poll=t.status_poll,
            watched_status_poll=t.watched_status_poll if watched else None,
            replica_id=self._replica_id,
            lease_ttl=self._lease_ttl,
            turn_deadline=limits[0],
            queue_deadline=limits[1],
        )

    def tick_wanted(self, operation_id: str) -> bool:
        """A wake (a timer, a changed row, the due scan): True if a drive starts
        now. One drive at a time: a wake while one runs is owed, and
        ``drive_ended`` asks for it (a limit timer that fires a moment before
        its time, during the drive it started, must not be lost)."""
        if self.memory.of(operation_id).driving:
            self.memory.update(operation_id, tick_owed=True)
            return False
        self.memory.update(operation_id, driving=True)
        return True

    def drive_ended(self, operation_id: str) -> bool:
        """A drive started by ``tick_wanted`` ended; True if a wake came meanwhile
        (look at it again now)."""
        owed = self.memory.of(operation_id).tick_owed
        self.memory.update(operation_id, driving=False, tick_owed=False)
        return owed

    def routing(self, operation_id: str) -> bool:
        """A grant is routing it now (its slot reserved: C6)."""
        return self.memory.of(operation_id).routing

    def granted(self, grant: Grant, identity: RunnerIdentity | None) -> Tick:
        """C6: a grant routes its turn; the Tick its step decides."""
        op_id = grant.operation_id
        self.memory.update(op_id, routing=True)
        return Tick(
            route=grant.runner, route_identity=identity, retry_streak=self.agenda.streak(op_id)
        )

    def first_attempt(
        self,
        record: OperationRecord,
        identity_of: Callable[[str], RunnerIdentity | None],
        context: Context,
        *,
        executor: str = DEFAULT_EXECUTOR,
        policy: Policy = decide,
    ) -> Decision | None:
        """C1a: the write-ahead decision for a just-built QUEUED turn that can be
        sent at once, its slot reserved as a grant's is (``routing``) until
        ``grant_ended``. None, with nothing reserved, if it would wait (something
        of its class waits, no serving runner has a free slot), if no live watch
        knows the runner's identity (C2a), or if the core decides anything but a
        write-ahead (its deadline already passed, say). ``executor``: the one the
        turn names (C6b); ``policy``: the core's ``decide`` (teeth tests pass theirs)."""
        if record.state is not OpState.QUEUED or record.attempt_count:
            return None
        op_id = record.operation_id
        scheduler = self.scheduler
        runner = scheduler.grant_at_once(
            op_id, record.principal, record.pool, record.kind, executor
        )
        if runner is None:
            return None
        identity = identity_of(runner)
        decision = None
        if identity is not None:
            decision = policy(record, Tick(route=runner, route_identity=identity), context)
        change = decision.change if decision is not None else None
        if decision is None or change is None or change.new_attempt is None:
            scheduler.unbind(op_id)  # nobody of its class waits: no grant is owed
            return None
        self.memory.update(op_id, routing=True)
        return decision

    def grant_ended(
        self, operation_id: str, last: OperationRecord | None, now: datetime
    ) -> GrantEnd:
        """The drive a grant started is over; ``last``: the record as it last saw it
        (None: never read, so nothing was bound)."""
        self.memory.update(operation_id, routing=False)
        scheduler = self.scheduler
        freed = (
            scheduler.unbind(operation_id)
            if last is None
            else scheduler.follow(last, routing=False)
        )
        if last is None or last.state is not OpState.QUEUED:
            return GrantEnd(freed)
        known = self.memory.of(operation_id)
        if waits_for_its_time(known, now):
            return GrantEnd(freed, wait_until=known.not_before)
        return GrantEnd(freed, hold_again=True)

    def adopted(self, record: OperationRecord) -> bool:
        """O3: an operation adopted from a lapsed lease is counted here now; True
        if that freed a slot."""
        if record.state is not OpState.QUEUED:
            self.scheduler.drop(record.operation_id)
        return self.scheduler.follow(record, routing=False)

    def committed(self, after: OperationRecord, now: datetime) -> bool:
        """A commit this process made; True if it freed a slot (route what fits)."""
        op_id = after.operation_id
        self.agenda.committed(after, now)
        if after.state is not OpState.QUEUED:
            self.scheduler.drop(op_id)  # no longer waits in a fair queue
        if after.state.terminal:
            self.memory.update(op_id, limits=None)
        return self.scheduler.follow(after, routing=self.routing(op_id))
