"""A simulated coordinator process: the shipped driver (``coordinator_svc.driver``)
and pure core, performed against an in-memory journal and the simulated network.

What it decides is what the coordinator ships: each event is one step of
``driver.step`` (who may act under §5, C6's hold, the core's decision, the
compare-and-set commit through ``coordinator_svc.storage.rules``), grants,
grant ends, commits, first attempts with their acceptance (C1a), the due
scan's rule and the decision context come from the ``Driver``, and a new
turn is ``core.birth.born``. What is its own is the world around them: calls
are messages on the simulated network with virtual deadlines (a call past its
deadline is abandoned and its reply, if it ever comes, is discarded: C8a), a
process can crash right after a commit or freeze before or after one (the
suspended step resumes when it wakes), and a restart (C12) forgets every live
call and timer, bumps the epoch (replies to the old process are discarded)
and feeds ``Restarted`` to every operation. Commands are performed only after
the commit (C4: persist before you send).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core import commands as cmd
from coordinator_svc.core.birth import Birth, born
from coordinator_svc.core.decide import decide
from coordinator_svc.core.decide_member import not_a_member
from coordinator_svc.core.decision import Context, Decision
from coordinator_svc.core.events import (
    Event,
    PreflightAnswer,
    Restarted,
    RunnerIdentity,
    RunnerReported,
    Tick,
)
from coordinator_svc.core.model import (
    AttemptRecord,
    Change,
    EventRecord,
    OperationRecord,
    OpState,
    ReplayPolicy,
    TurnKind,
)
from coordinator_svc.core.scheduler import Scheduler
from coordinator_svc.driver.agenda import Agenda
from coordinator_svc.driver.attention import due_scan_ticks
from coordinator_svc.driver.driver import Driver, Timings
from coordinator_svc.driver.memory import Memory
from coordinator_svc.driver.runners import LIVE_WITHIN, Runners
from coordinator_svc.driver.step import (
    Adopted,
    Claim,
    Commit,
    Effect,
    HoldForGrant,
    Load,
    LoadAttempts,
    Refused,
    Replica,
    StepEnd,
    StepMachine,
    Stepped,
)
from coordinator_svc.driver.step import step as step_machine
from coordinator_svc.ports import LeaseLost, StaleVersion
from tests.simulation.sim_journal import SimJournal
from tests.simulation.sim_membership import SimMembership
from tests.simulation.sim_scheduling import SimScheduling
from tests.simulation.wire import (
    Call,
    WatchReport,
    failure_event,
    reply_event,
    runner_op,
    summary,
)
from tests.simulation.world import (
    CancelRequest,
    DispatchRequest,
    Message,
    Network,
    ReleaseRequest,
    StatusRequest,
    at,
    turn_executor,
    turn_heartbeat,
)
from turnwire.backoff import backoff_seconds

Policy = Callable[[OperationRecord, Event, Context], Decision]

CALL_TIMEOUTS = {"status": 2.0, "dispatch": 5.0, "cancel": 2.0, "release": 2.0}
LEASE_TTL = 15.0
MAX_AGAIN = 6
MAX_EFFECTS = 256


def new_driver(scheduling: SimScheduling | None, replica_id: str) -> Driver:
    """A process's driver (memory, agenda, the scheduler's ledger, the decision
    context), with the default timings; without scheduled schedules its
    scheduler routes nothing (ticks name their runner)."""
    scheduler = scheduling.scheduler if scheduling is not None else Scheduler([])
    return Driver(scheduler, Timings(), replica_id=replica_id, lease_ttl=LEASE_TTL)


class CoordinatorCrashed(Exception):
    """The coordinator process died right after a commit, before sending (C4, C12)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class CoordinatorPaused(CoordinatorCrashed):
    """The replica froze (a long GC pause, a stopped VM) in the middle of a step (§5)."""


class ShellError(Exception):
    """The simulated shell could not apply a decision (a core or shell bug)."""


class Observer(Protocol):
    def committed(self, change: Change, stored: OperationRecord, cause: Event) -> None: ...

    def sending_dispatch(self, runner: str, request: DispatchRequest) -> None: ...

    def granted(
        self, slot_class: tuple[str, TurnKind], principal: str, waiting: set[str]
    ) -> None: ...


@dataclass
class SimCoordinator:
    network: Network
    observer: Observer
    policy: Policy = decide
    journal: SimJournal = field(default_factory=SimJournal)
    epoch: int = 1
    calls: dict[int, Call] = field(default_factory=dict)
    # When each operation is looked at next and its streak of fruitless tries:
    # the driver's own rules (driver.agenda, in the Driver).
    driver: Driver = field(init=False)
    memory: Memory = field(init=False)
    agenda: Agenda = field(init=False)
    alarms: list[tuple[str, str, str]] = field(default_factory=list)
    tags: Counter[str] = field(default_factory=Counter)
    counters: Counter[str] = field(default_factory=Counter)
    log: list[str] = field(default_factory=list)
    next_call: int = 1
    now: float = 0.0
    # Asked after every commit: True kills the process before it sends anything.
    crash_after_commit: Callable[[], bool] | None = None
    # The process's name (replies are routed to it).
    name: str = "c1"
    # §5: "" is single-replica mode (no leases, one coordinator); else the
    # replica's name, and ``replica_id`` is this process's owner string,
    # ``<name>#<epoch>``, as the engine's is ``<replica id>#<process tag>``.
    replica_name: str = ""
    replica_id: str = ""
    # The virtual time of this process's last lease renewal (O2, O4).
    renewed_at: float = float("-inf")
    # Asked before every commit: "before" / "after" freezes the replica there.
    pause_at_commit: Callable[[], str] | None = None
    paused: bool = False
    # What a frozen replica will still do when it wakes up: (operation, event,
    # the suspended driver step, the effect it waits on or the record its
    # commit stored, depth) in order.
    pending: list[tuple[str, Event, StepMachine, Effect | OperationRecord, int]] = field(
        default_factory=list
    )
    # The fix proposed for the stale-status bug, applied in the shell: a status
    # answer asked before the operation's latest transition is discarded.
    stale_status_guard: bool = False
    # Issue 9: the real scheduler routes every QUEUED turn (scheduled schedules).
    scheduling: SimScheduling | None = None
    # C2a: who each runner is, as its last status answer said, and when it was
    # last heard from (any reply or watch report), in the driver's own record
    # (driver.runners: a first attempt skips its preflight only while the runner
    # is known live). The engine learns the identity from its live watch and
    # forgets it when the stream breaks; this one keeps it across runner
    # restarts it has not heard of, so a first attempt is often bound to a
    # stale incarnation (the runner must refuse it, C5).
    known: Runners = field(default_factory=Runners)
    # C2a's freshness (seconds): the shipped default unless a schedule says otherwise.
    live_within: float = LIVE_WITHIN
    # Issue 10, as the engine does it (dispatcher/first_attempt.py): a turn its
    # scheduler grants at once, on a runner it knows, is stored with its first
    # attempt written ahead in the acceptance's own transaction.
    attempt_with_acceptance: bool = True
    # §11: this process's view of the runner set (None: every runner, no
    # membership in this schedule) and of the drains, and the journal's set it
    # reads at a restart (M5). Nothing is sent to a runner outside the view (M6).
    members: frozenset[str] | None = None
    drained: frozenset[str] = frozenset()
    membership: SimMembership | None = None
    # R12, R14: turns name executors and carry heartbeat timeouts (world.turn_executor).
    executor_rules: bool = True

    # --- client calls -------------------------------------------------------------

    def __post_init__(self) -> None:
        self._new_driver()
        self.known = Runners(self.live_within)
        if self.replica_name:
            self.replica_id = f"{self.replica_name}#{self.epoch}"

    def renew(self) -> None:
        """O2: the keeper renews this process's leases (every quarter TTL while it
        runs: called as its time passes and before it acts; never while frozen)."""
        if not self.replica_id or self.paused:
            return
        if self.now - self.renewed_at >= LEASE_TTL / 4:
            self.journal.renew_leases(self.replica_id, at(self.now), LEASE_TTL)
            self.renewed_at = self.now

    def submit(
        self,
        operation_id: str,
        policy: ReplayPolicy,
        max_attempts: int,
        kind: TurnKind,
        principal: str = "sim",
    ) -> None:
        envelope = f"envelope:{operation_id}".encode()
        when = at(self.now)
        # The one birth the API and a requeue use too (C1).
        record, first = born(
            Birth(
                operation_id=operation_id,
                principal=principal,
                idempotency_key_digest=hashlib.sha256(operation_id.encode()).hexdigest(),
                request_digest=hashlib.sha256(envelope).hexdigest(),
                envelope=envelope,
                pool="default",
                kind=kind,
                replay_policy=policy,
                max_attempts=max_attempts,
            ),
            when,
        )
        if self.replica_id:  # accepted here: under this process's lease (O1)
            self.renew()
            record = dataclasses.replace(
                record,
                lease_owner=self.replica_id,
                lease_expires_at=when + timedelta(seconds=LEASE_TTL),
            )
        if not self._submit_with_first_attempt(record, first):
            self.journal.submit(record, first)

    def _submit_with_first_attempt(self, record: OperationRecord, first: EventRecord) -> bool:
        """The acceptance and the first attempt's write-ahead as one journal step
        (nothing can happen between them, as in one transaction), then the send.
        False (nothing done) where the engine would store the turn QUEUED alone."""
        if self.scheduling is None or not self.attempt_with_acceptance or self.replica_id:
            return False
        ctx = self.driver.context((), (None, None), at(self.now))
        # Who waits in its class before it is granted (the fairness checker's
        # input: empty unless the scheduler let it jump the queue).
        waiting = self.scheduling.waiting_principals(record.pool, record.kind)
        decision = self.driver.first_attempt(record, self.live, ctx, policy=self.policy)
        if decision is None or decision.change is None:
            return False
        op = record.operation_id
        change = decision.change
        runner = change.after.runner or ""
        self.observer.granted((record.pool, record.kind), record.principal, waiting)
        self.log.append(f"    granted {op} -> {runner} with its acceptance")
        self.journal.submit(record, first)
        stored = self.journal.commit(change)
        self.counters["first_attempt_with_acceptance"] += 1
        self.driver.committed(stored, at(self.now))
        self.tags.update(decision.tags)
        self.observer.committed(change, stored, Tick(route=runner))
        if self.crash_after_commit is not None and self.crash_after_commit():
            self.counters["crash_after_first_attempt_with_acceptance"] += 1
            raise CoordinatorCrashed(self.name, f"{op}: crashed after the commit")
        gone = [event for c in decision.commands if (event := self.perform(stored, c))]
        for event in gone:
            self.handle(op, event, 1)
        self._settle(op)
        return True

    def _new_driver(self) -> None:
        self.driver = new_driver(self.scheduling, self.replica_id)
        self.memory, self.agenda = self.driver.memory, self.driver.agenda

    def record(self, operation_id: str) -> OperationRecord:
        return self.journal.operations[operation_id]

    # --- the decide loop ------------------------------------------------------------

    def handle(self, operation_id: str, event: Event, depth: int = 0) -> None:
        self._handle(operation_id, event, depth)
        if depth == 0:
            self._settle(operation_id)

    def _settle(self, operation_id: str) -> None:
        """After a step: a grant whose calls are all answered ends (the driver's
        rule, as in the engine); otherwise the ledger follows the journal."""
        if self.scheduling is None:
            return
        record, busy = self.record(operation_id), self.busy(operation_id)
        if self.driver.routing(operation_id) and not busy:
            self.driver.grant_ended(operation_id, record, at(self.now))
            return
        self.scheduling.settle(record, busy)

    def _handle(self, operation_id: str, event: Event, depth: int) -> None:
        """One step of the shipped driver (``coordinator_svc.driver.step``), its
        effects performed against this process's journal, then its commands."""
        if depth > MAX_AGAIN:
            raise ShellError(f"{operation_id}: decide-again did not settle")
        if self.replica_id:
            self.renew()
        machine = step_machine(
            operation_id,
            event,
            self._context_for,
            replica=Replica(self.replica_id) if self.replica_id else None,
            policy=self.policy,
        )
        self._run(operation_id, event, machine, next(machine), depth)

    def _context_for(self, attempts: tuple[AttemptRecord, ...], record: OperationRecord) -> Context:
        return self.driver.context(attempts, (None, None), at(self.now))

    def _run(
        self,
        operation_id: str,
        event: Event,
        machine: StepMachine,
        effect: Effect | OperationRecord,
        depth: int,
    ) -> None:
        """Perform the step's effects until it ends (``effect``: the next one, or
        the record a commit stored, when a frozen replica resumes after it)."""
        try:
            for _ in range(MAX_EFFECTS):
                if isinstance(effect, OperationRecord):
                    outcome: object = effect
                else:
                    outcome = self._perform_effect(operation_id, event, machine, effect, depth)
                effect = machine.send(outcome)
        except StopIteration as done:
            self._stepped(operation_id, event, done.value, depth)
            return
        raise ShellError(f"{operation_id}: a step yielded more than {MAX_EFFECTS} effects")

    def _perform_effect(
        self, operation_id: str, event: Event, machine: StepMachine, effect: Effect, depth: int
    ) -> object:
        match effect:
            case Load():
                return self.journal.operations.get(effect.operation_id)
            case LoadAttempts():
                return self.journal.attempt_rows(effect.operation_id)
            case Claim(record=record):
                return self._claim(record)
            case Commit():
                return self._commit(operation_id, event, machine, effect, depth)
            case HoldForGrant() | Adopted():
                return "" if isinstance(effect, HoldForGrant) else None
        raise ShellError(f"not a step effect: {effect!r}")  # pragma: no cover

    def _claim(self, record: OperationRecord) -> OperationRecord | None:
        """O3: adopt an orphan (a claim is a write); None if it is no longer one."""
        claimed = self.journal.claim(record.operation_id, self.replica_id, at(self.now), LEASE_TTL)
        if claimed is None:
            self.log.append(f"    {self.replica_id}: lease held by {record.lease_owner}")
            return None
        if claimed.fencing_token != record.fencing_token:
            self.log.append(
                f"    {self.replica_id}: took over from {record.lease_owner}, "
                f"token {claimed.fencing_token}"
            )
        return claimed

    def _commit(
        self, operation_id: str, event: Event, machine: StepMachine, effect: Commit, depth: int
    ) -> OperationRecord | Refused:
        """A compare-and-set commit; a replica may freeze just before or after it."""
        change = effect.change
        if effect.mark:
            return self._commit_mark(effect, event)
        pause = self.pause_at_commit() if self.pause_at_commit is not None else ""
        if pause == "before":
            self._freeze(operation_id, event, machine, effect, depth, committed=False)
        try:
            stored = self.journal.commit(change)
        except LeaseLost:
            self.counters["replica_lease_lost_commit_refused"] += 1
            self.log.append(f"    {operation_id}: lease lost; nothing sent (§5)")
            return Refused.LEASE_LOST
        except StaleVersion:
            self.counters["replica_stale_version_redecided"] += 1
            self.log.append(f"    {operation_id}: stale version; decide again")
            return Refused.STALE
        self.driver.committed(stored, at(self.now))
        self.tags.update(effect.decision.tags)
        self.observer.committed(change, stored, Restarted() if effect.adopting else event)
        if self.crash_after_commit is not None and self.crash_after_commit():
            raise CoordinatorCrashed(self.name, f"{operation_id}: crashed after the commit")
        if pause == "after":
            self._freeze(operation_id, event, machine, stored, depth, committed=True)
        return stored

    def _commit_mark(self, effect: Commit, event: Event) -> OperationRecord | Refused:
        """O5: a client's cancel stored for the owner (no lease written, nothing sent)."""
        try:
            stored = self.journal.commit(effect.change)
        except LeaseLost:
            return Refused.LEASE_LOST
        except StaleVersion:
            return Refused.STALE
        self.counters["cancel_marked_for_owner"] += 1  # not ours: memory unchanged, as the engine
        self.observer.committed(effect.change, stored, event)
        return stored

    def _stepped(self, operation_id: str, event: Event, end: StepEnd, depth: int) -> None:
        """The step ended: perform its decision's commands (C4: after the commit)."""
        if not isinstance(end, Stepped):
            self.log.append(
                f"    {self.replica_id or 'decide'} {type(event).__name__}: {end.value}"
            )
            return
        if end.illegal:
            raise ShellError(f"{operation_id}: {end.decision.note}")
        decision = end.decision
        who = self.replica_id or "decide"
        if end.mark:
            who = f"{self.replica_id} cancel mark"
        self.log.append(
            f"    {who} {type(event).__name__} on {end.record.state}: {summary(decision)}"
        )
        if end.mark:
            return  # only the owner sends
        gone = [answer for c in decision.commands if (answer := self.perform(end.record, c))]
        for answer in gone:  # §11 M6: decided once the step's commands are out, as the engine does
            self.handle(operation_id, answer, depth + 1)
        if decision.again:
            self.handle(operation_id, Tick(), depth + 1)

    def _freeze(
        self,
        operation_id: str,
        event: Event,
        machine: StepMachine,
        at_effect: Effect | OperationRecord,
        depth: int,
        *,
        committed: bool,
    ) -> None:
        self.paused = True
        self.pending.append((operation_id, event, machine, at_effect, depth))
        where = "after" if committed else "before"
        raise CoordinatorPaused(self.name, f"{self.name} froze {where} a commit on {operation_id}")

    def resume(self) -> None:
        """The frozen replica wakes up and carries on where it stopped."""
        self.paused = False
        pending, self.pending = self.pending, []
        for operation_id, event, machine, at_effect, _depth in pending:
            self._run(operation_id, event, machine, at_effect, 0)

    def follow(self, view: tuple[frozenset[str], frozenset[str]]) -> None:
        """The set and the drains as this process now reads them (§11 M5); its
        scheduler grants only to members that are not drained."""
        before = self.members
        self.members, self.drained = view
        if self.scheduling is None:
            return
        scheduler = self.scheduling.scheduler
        scheduler.set_runners([RunnerEndpoint(name, "sim") for name in sorted(self.members)])
        for name in (before or frozenset()) - self.members:
            scheduler.forget(name)
        for name in self.members - (before or frozenset()):
            slots = self.scheduling.sizes[name]  # as its watch's GetRunnerInfo would say
            scheduler.learned(name, {TurnKind.WRITABLE: slots, TurnKind.READ_ONLY: slots})
        scheduler.avoid((), self.drained)

    def perform(self, record: OperationRecord, command: cmd.Command) -> Event | None:
        """Send what ``command`` asks; the answer when its runner is not a member (M6)."""
        op = record.operation_id
        runner = getattr(command, "runner", None)
        if self.members is not None and runner is not None and runner not in self.members:
            self.log.append(f"    {runner} is not a member: {type(command).__name__} not sent")
            self.counters[f"not_a_member:{type(command).__name__}"] += 1
            return not_a_member(record, command)
        match command:
            case cmd.Preflight():
                self._call(op, "status", command.runner, record, command, StatusRequest(op))
            case cmd.Dispatch():
                request = DispatchRequest(
                    op,
                    record.envelope_digest,
                    record.kind.value,
                    command.incarnation_id,
                    command.fencing_token,
                    command.attempt,
                    command.dispatch_stamp,
                    # Fixed in the envelope: the same on every attempt (R12, R14).
                    turn_executor(op) if self.executor_rules else "",
                    turn_heartbeat(op) if self.executor_rules else None,
                )
                self.observer.sending_dispatch(command.runner, request)
                self._call(op, "dispatch", command.runner, record, command, request)
            case cmd.Cancel():
                request_c = CancelRequest(op, command.incarnation_id, command.fencing_token)
                self._call(op, "cancel", command.runner, record, command, request_c)
            case cmd.Release():
                request_r = ReleaseRequest(op, command.incarnation_id, command.fencing_token)
                self._call(op, "release", command.runner, record, command, request_r)
            case cmd.ScheduleAt():
                self.agenda.scheduled(record, command.at)
            case cmd.Alarm():
                self.alarms.append((op, command.reason, command.detail))
        return None

    def _call(
        self, op: str, kind: str, runner: str, record: OperationRecord, command: Any, body: Any
    ) -> None:
        if self.members is not None and runner not in self.members:
            raise ShellError(f"{op}: {kind} sent to {runner}, not a member (§11 M6)")
        call = Call(
            self.next_call,
            op,
            kind,
            runner,
            record.attempt_count,
            self.now + CALL_TIMEOUTS[kind],
            command,
            record.last_event_sequence,
            record.fencing_token,
        )
        self.next_call += 1
        self.calls[call.id] = call
        self.network.send(runner, call.id, self.epoch, body, replica=self.name)
        self.log.append(f"    send {kind} #{call.id} -> {runner}")

    # --- time, replies, restarts ----------------------------------------------------

    def live(self, runner: str) -> RunnerIdentity | None:
        """C2a: the identity a first attempt may bind to without a preflight now
        (counted when one is known but the runner has not been heard from lately)."""
        identity = self.known.live_identity(runner, at(self.now))
        if identity is None and self.known.of(runner).identity is not None:
            self.counters["c2a_not_live"] += 1
        return identity

    def busy(self, operation_id: str) -> bool:
        return any(c.operation_id == operation_id for c in self.calls.values())

    def due(self, *, include_busy: bool = False) -> list[str]:
        """Operations the dispatcher would pick up now, as the engine does: a timer
        that came due (the agenda's time), or the due scan (the journal's
        next_action_at, unless the agenda has a later time for it).

        A well-behaved dispatcher skips operations with a call in flight;
        ``include_busy`` also lists those (a dispatcher that lost track of one).
        """
        found = []
        now = at(self.now)
        for op, record in self.journal.operations.items():
            if not include_busy and self.busy(op):
                continue
            if record.state.terminal:
                if not record.released:
                    found.append(op)
                continue
            timer = self.agenda.not_before(op)
            timer_due = timer is not None and timer <= now
            # The engine's due scan rule (driver.attention); busy ones were skipped above.
            scan_due = (
                record.next_action_at is None or record.next_action_at <= now
            ) and due_scan_ticks(
                record, self.memory.of(op), now, owner=None, dispatching=False, held=False
            )
            if timer_due or scan_due:
                found.append(op)
        return found

    def tick(self, operation_id: str, route: str | None) -> None:
        if route == "*":
            self._scheduled_tick(operation_id)
            return
        self.agenda.now_due(operation_id)  # its timer (if any) is spent
        streak = self.agenda.streak(operation_id)
        identity = self.live(route) if route is not None else None
        self.handle(operation_id, Tick(route=route, route_identity=identity, retry_streak=streak))
        record = self.journal.operations.get(operation_id)
        if route is None and record is not None and record.state is OpState.QUEUED:
            # No route: the real engine holds the turn until its scheduler grants a
            # slot (issue 9). Model "a slot frees later" as a timer with the backoff.
            delay = backoff_seconds(
                streak, initial=Context.backoff_initial, cap=Context.backoff_max
            )
            self.agenda.later(operation_id, at(self.now + delay))

    def _scheduled_tick(self, operation_id: str) -> None:
        """Issue 9, as the engine does it: hold the QUEUED turn, perform every grant
        the real scheduler makes (fairest first) as a routed Tick through the core."""
        record = self.record(operation_id)
        if self.scheduling is None or record.state is not OpState.QUEUED:
            self.tick(operation_id, None)
            return
        grants = self.scheduling.grants_for(record)
        for n, grant in enumerate(grants):
            granted = self.record(grant.operation_id)
            slot_class = (granted.pool, granted.kind)
            waiting = self.scheduling.waiting_principals(*slot_class) | {
                self.record(later.operation_id).principal
                for later in grants[n + 1 :]
                if (self.record(later.operation_id).pool, self.record(later.operation_id).kind)
                == slot_class
            }
            self.observer.granted(slot_class, granted.principal, waiting)
            self.log.append(f"    granted {grant.operation_id} -> {grant.runner}")
        for grant in grants:
            tick = self.driver.granted(grant, self.live(grant.runner))
            self.handle(grant.operation_id, tick)
        if self.scheduling.scheduler.holding(operation_id):
            self.tick(operation_id, None)  # waits: the core says so; looked at again later

    def expire_calls(self) -> None:
        """Abandon every call past its deadline (C7, C8a)."""
        for call in sorted(self.calls.values(), key=lambda c: c.id):
            if call.deadline <= self.now and call.id in self.calls:
                del self.calls[call.id]
                self.log.append(f"    call #{call.id} ({call.kind}) abandoned at its deadline")
                failure = failure_event(call, "DEADLINE_EXCEEDED", self.agenda)
                if failure is not None:
                    self.handle(call.operation_id, failure)
                self._settle(call.operation_id)

    def receive(self, message: Message) -> str:
        """A reply or watch report arrives; returns what became of it."""
        if message.epoch != self.epoch:
            return "discarded: sent to an earlier coordinator process (C8a)"
        if isinstance(message.body, WatchReport):
            body = message.body
            self.known.heard(body.runner, at(self.now))
            if body.row.operation_id not in self.journal.operations:
                return "watch report for an unknown operation"
            event = RunnerReported(body.runner, body.incarnation_id, runner_op(body.row))
            self.handle(body.row.operation_id, event)
            return "watch report"
        call = self.calls.pop(message.call_id, None)
        if call is None:
            return "discarded: the call was abandoned or already answered (C8a)"
        if self.replica_id and self.record(call.operation_id).fencing_token != call.asked_token:
            return f"reply to #{call.id} discarded: asked under a lease since lost (§5, C8a)"
        if (
            self.stale_status_guard
            and call.kind == "status"
            and self.record(call.operation_id).last_event_sequence != call.asked_sequence
        ):
            return f"reply to #{call.id} discarded: asked before the latest transition"
        event = reply_event(call, message.body, self.agenda)
        if isinstance(event, PreflightAnswer):
            identity = RunnerIdentity(event.incarnation_id, event.store_id)
            self.known.identified(event.runner, identity, at(self.now))
        self.known.heard(call.runner, at(self.now))
        if event is not None:
            self.handle(call.operation_id, event)
        self._settle(call.operation_id)
        return f"reply to #{call.id} ({call.kind})"

    def restart(self) -> None:
        """C12: a new process: no live call, no timer; DISPATCHING -> DISPATCH_UNKNOWN.
        A replica's new process ends its earlier ones' leases and adopts (O3)."""
        self.epoch += 1
        if self.replica_name:
            self.replica_id = f"{self.replica_name}#{self.epoch}"
            self.renewed_at = float("-inf")
            self.journal.expire_leases(f"{self.replica_name}#", self.replica_id, at(self.now))
        self.calls.clear()
        self.known = Runners(self.live_within)
        self.paused = False
        self.pending = []
        if self.scheduling is not None:
            self.scheduling.reset(self.journal.operations.values())
        self._new_driver()
        if self.membership is not None:  # read before recovery and the first grant (M5)
            self.members = None
            self.follow(self.membership.view())
        for op in sorted(self.journal.operations):
            self.handle(op, Restarted())
