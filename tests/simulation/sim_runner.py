"""A simulated runner built around runner_svc's pure core (R1-R9, §6).

It follows ``runner_svc.service`` step for step, but synchronously: one call
is one atomic step (the real shell holds the operation's lock for the same
span). Each admitted job's life is the real ``runner_svc.core.job_lifecycle``
machine, interpreted against this store, the ledger and the slot pools by
:mod:`tests.simulation.sim_runner_jobs` (launch, its crash points, settlement,
the held slot of R7); nothing here decides about a job.

A turn that launches at once is admitted with its launch intent in one write,
as the real runner does (issue 27; the job then starts READY). An incarnation
may instead run the release before that (``intent_apart``: a rolling upgrade
or downgrade), which writes every admission alone and the intent after it:
the world strips the merged intent from the core's decision, as that release
never made it, so rows an older process left ACCEPTED meet newer ones (§6
re-admission) and the other way round.

The store is an in-memory dict of rows. A restart makes a new incarnation;
the store is kept (same ``store_id``: a durable store, §6) or wiped (a new,
empty store with a new ``store_id``). Like the real store it keeps the §6
witness (runner_svc.core.witness): the owner's admission floor, raised before
every call the runner handles, and the chain of openings; a restore puts all
of it back to the snapshot, under the same ``store_id`` (issue 8.1: nothing
in a file copied over the original tells it apart).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from runner_svc.core.admission import (
    AdmissionAction,
    DispatchFacts,
    SlotPools,
    check_incarnation,
    decide_admission,
)
from runner_svc.core.model import (
    DEFAULT_EXECUTOR,
    Execution,
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
    Admit,
    IllegalRowEvent,
    LaunchIntent,
    RaiseFencingToken,
    RowEvent,
    TakeOver,
    apply,
)
from runner_svc.core.witness import (
    OPENINGS_KEPT,
    SEALED_FLOOR,
    StoreOpening,
    check_admissible,
    next_floor,
)
from tests.simulation.sim_retention import SimRetention, prune
from tests.simulation.sim_runner_jobs import SimJob, SimJobRunner
from tests.simulation.world import (
    CancelRequest,
    DispatchRequest,
    Ledger,
    ReleaseRequest,
    Request,
    StatusRequest,
    served_executors,
    stamp_at,
    turn_retry,
)

# The real runner's default admission window and floor interval (ServiceSettings:
# W2a, the floor trails the clock by at most their sum).
ADMISSION_WINDOW_US = 250_000
FLOOR_INTERVAL = 0.25

# --- replies ------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusReply:
    incarnation_id: str
    store_id: str
    durable: bool
    present: bool
    row: OperationRow | None
    openings: tuple[StoreOpening, ...] = ()


@dataclass(frozen=True)
class DispatchReply:
    incarnation_id: str
    row: OperationRow
    duplicate: bool


@dataclass(frozen=True)
class RefusedReply:
    reason: str
    incarnation_id: str
    message: str = ""
    # What the refusal's ErrorInfo adds (DISPATCH_STALE: the admission floor, C6c).
    admission_floor: int | None = None


@dataclass(frozen=True)
class CancelReply:
    incarnation_id: str
    row: OperationRow | None
    tombstoned: bool


@dataclass(frozen=True)
class ReleaseReply:
    released: bool


Reply = StatusReply | DispatchReply | RefusedReply | CancelReply | ReleaseReply


@dataclass
class SimStore:
    """The runner's dedupe store: one row per operation across incarnations."""

    store_id: str
    durable: bool
    rows: dict[str, OperationRow] = field(default_factory=dict)
    sequence: int = 0
    # §6 witness: the owner, its floor, and the chain of openings (newest first).
    owner: str = ""
    floor: int = 0
    openings: tuple[StoreOpening, ...] = ()
    # §9 retention (sim_retention.py): when each row's release was recorded, the
    # kept keys of pruned rows (id -> (stamp bound, pruned at)), the retention floor.
    released_at: dict[str, float] = field(default_factory=dict)
    pruned: dict[str, tuple[int, float]] = field(default_factory=dict)
    retention_floor: int = 0

    def write(self, operation_id: str, change: RowEvent) -> OperationRow:
        current = self.rows.get(operation_id)
        if current is None and operation_id in self.pruned:
            raise pruned_refusal(operation_id)  # §9 K3: the store's trigger
        if isinstance(change, (Admit, TakeOver)):
            check_admissible(change.dispatch_stamp, self.floor, operation_id)
        if isinstance(change, LaunchIntent) and current and current.dispatch_stamp < self.floor:
            raise IllegalRowEvent(operation_id, current.state, change, "launch below the floor")
        row = apply(current, change, operation_id)
        self.sequence += 1
        row = replace(row, sequence=self.sequence)
        self.rows[operation_id] = row
        return row

    def open(self, incarnation_id: str) -> None:
        """A new owner: the chain records the floor the previous one left."""
        opening = StoreOpening(incarnation_id, self.owner, self.floor, 0.0)
        self.openings = (opening, *self.openings)[:OPENINGS_KEPT]
        # §9 K4: a new owner's floor starts at the retention floor, not 0.
        self.owner, self.floor = incarnation_id, self.retention_floor

    def raise_floor(self, target: int) -> None:
        launchable = (
            row.dispatch_stamp
            for row in self.rows.values()
            if row.state is RowState.ACCEPTED
            and row.incarnation_id == self.owner
            and row.stop_reason is None
        )
        self.floor = next_floor(self.floor, target, launchable)

    def snapshot(self) -> SimStore:
        """A copy as a backup would hold it (rows, floor, chain, owner)."""
        return replace(
            self, rows=dict(self.rows), released_at=dict(self.released_at), pruned=dict(self.pruned)
        )


@dataclass
class SimRunner:
    name: str
    durable: bool
    slots: int
    ledger: Ledger
    incarnation_id: str
    store: SimStore
    pools: SlotPools = field(init=False)
    job_runner: SimJobRunner = field(init=False)
    accepting: bool = True
    counters: Counter[str] = field(default_factory=Counter)
    # §9: prune before every call, by these rules (None: never prune).
    retention: SimRetention | None = None
    # This incarnation runs the release before issue 27: its admissions never
    # carry the launch intent (see the module docstring).
    intent_apart: bool = False
    # §6.1 W2a: the floor trails the clock by the window, raised every interval.
    admission_window_us: int = ADMISSION_WINDOW_US
    floor_interval: float = FLOOR_INTERVAL

    def __post_init__(self) -> None:
        self._start_process()

    def _start_process(self) -> None:
        self.pools = _pools(self.slots)
        self.job_runner = SimJobRunner(
            self.name, self.incarnation_id, self.store, self.ledger, self.pools, self.counters
        )

    @property
    def jobs(self) -> dict[str, SimJob]:
        """The jobs holding a slot (menu.py reads their ``phase``)."""
        return self.job_runner.jobs

    # --- process life -----------------------------------------------------------

    def drain(self, now: float | None = None) -> None:
        """R8: stop admission and record SHUTDOWN as every job's stop reason."""
        self.accepting = False
        self.job_runner.drain(now)
        self.store.raise_floor(SEALED_FLOOR)

    def restart(
        self, incarnation_id: str, new_store: SimStore | None, *, intent_apart: bool = False
    ) -> None:
        """Crash and start again (``intent_apart``: on the release before issue 27):
        every job dies with the process (R1)."""
        self.job_runner.die()
        self.incarnation_id = incarnation_id
        self.intent_apart = intent_apart
        if new_store is not None:
            self.store = new_store
        self.store.open(incarnation_id)
        self.accepting = True
        self._start_process()

    # --- requests ---------------------------------------------------------------

    def keep_time(self, now: float) -> None:
        """What the real runner does on its timers, done here before every call: raise
        the admission floor as its floor keeper last did, at the latest multiple of
        ``floor_interval`` (a draining runner admits nothing more: it seals as soon as it
        can), and prune what retention allows (§9). Idempotent for one ``now``."""
        interval = self.floor_interval
        raised_at = (now // interval) * interval if interval > 0 else now
        self.store.raise_floor(
            stamp_at(raised_at) - self.admission_window_us if self.accepting else SEALED_FLOOR
        )
        if self.retention is not None:
            prune(self.store, self.retention, now, self.counters)

    def handle(self, request: Request, now: float, write_fails: bool) -> Reply:
        self.keep_time(now)
        try:
            match request:
                case StatusRequest():
                    return self.status(request.operation_id)
                case DispatchRequest():
                    return self.dispatch(request, now, write_fails)
                case CancelRequest():
                    return self.cancel(request, now, write_fails)
                case ReleaseRequest():
                    return self.release(request, write_fails, now)
        except RunnerRefusal as refusal:
            self.counters[f"refused:{refusal.refusal.value}"] += 1
            floor = refusal.details.get("admission_floor")
            return RefusedReply(
                refusal.refusal.value,
                self.incarnation_id,
                refusal.message,
                int(floor) if floor is not None else None,
            )
        raise TypeError(f"unknown request {request!r}")

    def status(self, operation_id: str) -> StatusReply:
        row = self.store.rows.get(operation_id)
        if row is None and operation_id in self.store.pruned:
            raise pruned_refusal(operation_id)  # §9 K3: never "absent"
        view = reported_row(row, self.incarnation_id) if row is not None else None
        return StatusReply(
            self.incarnation_id,
            self.store.store_id,
            self.store.durable,
            row is not None,
            view,
            self.store.openings if self.store.durable else (),
        )

    def view(self, row: OperationRow) -> OperationRow:
        return reported_row(row, self.incarnation_id)

    def dispatch(self, request: DispatchRequest, now: float, write_fails: bool) -> Reply:
        facts = DispatchFacts(
            request.operation_id,
            request.envelope_digest,
            request.expected_incarnation_id,
            request.fencing_token,
            SlotKind(request.kind),
            request.executor or DEFAULT_EXECUTOR,
        )
        row = self.store.rows.get(request.operation_id)
        admission = decide_admission(
            facts,
            row,
            incarnation_id=self.incarnation_id,
            accepting=self.accepting,
            pools=self.pools,
            now=now,
            openings=self.store.openings,
            executors=served_executors(self.name),  # R14
        )
        if self.intent_apart:  # the release before issue 27 never merged the intent
            admission = replace(admission, with_intent=False)
        if admission.action is AdmissionAction.DUPLICATE:
            assert row is not None
            self.counters["dispatch:duplicate"] += 1
            if admission.raise_fencing_token:
                row = self._write(
                    request.operation_id, RaiseFencingToken(request.fencing_token), write_fails
                )
            return DispatchReply(self.incarnation_id, self.view(row), duplicate=True)
        self.pools.reserve(facts.kind)
        change = admission_change(
            facts,
            row,
            incarnation_id=self.incarnation_id,
            attempt=request.attempt,
            dispatch_stamp=request.dispatch_stamp,
            now=now,
            with_intent=admission.with_intent,
        )
        if row is not None:
            self.counters["dispatch:take_over"] += 1
        try:
            row = self._write(request.operation_id, change, write_fails)
        except RunnerRefusal:
            self.pools.free(facts.kind)
            raise
        self.counters["dispatch:admitted"] += 1
        if admission.with_intent:
            self.counters["dispatch:admitted_with_intent"] += 1
        # Shutdown began while the row was being written: never launched (R8).
        self.job_runner.admit(
            request.operation_id,
            facts.kind,
            request.attempt,
            draining=not self.accepting,
            heartbeat_seconds=request.heartbeat_seconds,
            retry=turn_retry(request.operation_id),  # R15: fixed per turn, as its envelope
            with_intent=admission.with_intent,
        )
        return DispatchReply(self.incarnation_id, self.view(row), duplicate=False)

    def cancel(self, request: CancelRequest, now: float, write_fails: bool) -> Reply:
        check_incarnation(request.expected_incarnation_id, self.incarnation_id)
        op = request.operation_id
        row = self.store.rows.get(op)
        job = self.jobs.get(op)
        plan = plan_cancel(
            row,
            operation_id=op,
            token=request.fencing_token,
            incarnation_id=self.incarnation_id,
            has_job=job is not None,
            now=now,
        )
        before = row
        for change in plan.writes:
            row = self._write(op, change, write_fails)
        assert row is not None  # plan_cancel tombstones an unknown id
        if plan.tell_job and job is not None:
            self.job_runner.cancel(job, row, now, write_fails)  # the job decides (R6)
            row = self.store.rows[op]
        self._count_cancel(plan.outcome, before, row, job is not None)
        return CancelReply(
            self.incarnation_id, self.view(row), tombstoned=row.state is RowState.TOMBSTONED
        )

    def _count_cancel(
        self, outcome: str, row: OperationRow | None, after: OperationRow, has_job: bool
    ) -> None:
        if outcome == "tombstoned":
            self.counters["cancel:tombstoned"] += 1
        elif row is None or row.settled:
            return
        elif after.settled and after.execution is Execution.NOT_STARTED:
            # Never launched, or (issue 27) launched by its admission, not started.
            self.counters["cancel:settled_unlaunched"] += 1
        elif has_job and row.incarnation_id == self.incarnation_id:
            self.counters["cancel:asked_to_stop"] += 1

    def release(self, request: ReleaseRequest, write_fails: bool, now: float) -> Reply:
        check_incarnation(request.expected_incarnation_id, self.incarnation_id)
        row = self.store.rows.get(request.operation_id)
        released, change = plan_release(row, request.fencing_token)
        if change is not None:
            self._write(request.operation_id, change, write_fails)
            self.store.released_at[request.operation_id] = now  # the store's trigger (§9 K2)
        return ReleaseReply(released)

    # --- the jobs' lives (sim_runner_jobs: the real job_lifecycle machine) -----------

    def launch(self, operation_id: str, now: float, *, until: str) -> str:
        """R3's launch; ``until`` is the crash point or the executor's refusal."""
        return self.job_runner.launch(operation_id, now, until=until)

    def lapse(self, operation_id: str, now: float) -> str:
        """R12: the job's executor has sent no heartbeat since it started; its alarm fires."""
        return self.job_runner.lapse(operation_id, now)

    def finish(
        self, operation_id: str, succeeded: bool, now: float, write_fails: bool, effect: str = ""
    ) -> str:
        """The executor ended; settle (R7), the slot held if ``write_fails``; a failure
        may declare ``effect`` (R15: NONE is retried on a turn with a retry policy)."""
        return self.job_runner.finish(operation_id, succeeded, now, write_fails, effect)

    def retry(self, operation_id: str, now: float, *, until: str) -> str:
        """R15: the job's retry wait is over; its next execution launches."""
        return self.job_runner.retry(operation_id, now, until=until)

    def _write(self, operation_id: str, change: RowEvent, write_fails: bool) -> OperationRow:
        if write_fails:
            raise RunnerRefusal(Refusal.STORE_WRITE_FAILED, "the schedule failed this write")
        try:
            return self.store.write(operation_id, change)
        except IllegalRowEvent as exc:
            raise RunnerRefusal(Refusal.STORE_WRITE_FAILED, str(exc)) from exc


def _pools(slots: int) -> SlotPools:
    return SlotPools({SlotKind.WRITABLE: slots, SlotKind.READ_ONLY: slots})
