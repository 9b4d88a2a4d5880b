"""The §8 invariants, checked against the simulated world's ground truth.

The checker does not trust the cores: it reads the execution ledger (every
executor start, the billable event), what each runner actually did with
each Dispatch copy it received, and the journal. It keeps its own copy of
the §2 edge table, written from PROTOCOL.md.

Raises :class:`Violation` with a one-line description; the simulator adds
the seed, the trace and the operation's history.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from coordinator_svc.core.events import Event
from coordinator_svc.core.model import (
    AttemptOutcome,
    Change,
    Execution,
    OperationRecord,
    OpState,
    ReplayPolicy,
    TurnKind,
)
from coordinator_svc.core.stale import STALE_STREAK_LIMIT
from runner_svc.core.model import OperationRow, RowState, StopReason
from runner_svc.storage import executions_json
from tests.simulation.sim_journal import SimJournal
from tests.simulation.sim_membership import MembershipChecker
from tests.simulation.sim_runner import RefusedReply, SimRunner
from tests.simulation.sim_scheduling import SchedulingChecker
from tests.simulation.world import (
    DispatchRequest,
    ExecutionEntry,
    Ledger,
    served_executors,
    turn_retry,
)

_S = OpState
_TERMINAL = frozenset(
    {_S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.TIMED_OUT, _S.PROTOCOL_ERROR, _S.REJECTED}
)
# PROTOCOL.md §2, transcribed independently of coordinator_svc.core.edges.
PROTOCOL_EDGES: dict[OpState, frozenset[OpState]] = {
    _S.QUEUED: frozenset({_S.DISPATCHING, _S.CANCELLED, _S.TIMED_OUT, _S.RUNNING, *_TERMINAL}),
    _S.DISPATCHING: frozenset(
        {_S.RUNNING, _S.QUEUED, _S.DISPATCH_UNKNOWN, _S.REJECTED, _S.PROTOCOL_ERROR, *_TERMINAL}
    ),
    _S.DISPATCH_UNKNOWN: frozenset(
        {_S.DISPATCHING, _S.RUNNING, _S.CANCELLING, _S.TIMED_OUT, *_TERMINAL}
    ),
    _S.RUNNING: frozenset(
        {
            _S.CANCELLING,
            _S.SUCCEEDED,
            _S.FAILED,
            _S.CANCELLED,
            _S.TIMED_OUT,
            _S.PROTOCOL_ERROR,
            _S.DISPATCH_UNKNOWN,
        }
    ),
    _S.CANCELLING: frozenset(
        {_S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.TIMED_OUT, _S.PROTOCOL_ERROR}
    ),
    **{t: frozenset() for t in _TERMINAL},
}
_OUTCOME_FIELDS = ("state", "execution", "result", "error_reason", "stop_reason", "finished_at")
_DEFINITE = frozenset(
    {
        "INCARNATION_MISMATCH",
        "NO_FREE_SLOT",
        "SHUTTING_DOWN",
        "STORE_WRITE_FAILED",
        "STALE_FENCING_TOKEN",
        "ENVELOPE_MISMATCH",
        "ENVELOPE_INVALID",
        "CANCELLED_BEFORE_DISPATCH",
        "DISPATCH_STALE",  # below the admission floor: never admitted (§6.1)
        "EXECUTOR_NOT_SERVED",  # R14: refused before anything was written
    }
)


# Refusals that never count toward max_attempts: a full runner's (C6a), a stale
# Dispatch's (C6c).
_UNCOUNTED = frozenset({"refused:NO_FREE_SLOT", "refused:SHUTTING_DOWN", "refused:DISPATCH_STALE"})


class Violation(Exception):
    """An invariant of PROTOCOL.md §8 does not hold."""

    def __init__(self, invariant: str, operation_id: str, message: str) -> None:
        super().__init__(f"[{invariant}] {operation_id}: {message}")
        self.invariant = invariant
        self.operation_id = operation_id


@dataclass
class Checker:
    journal: SimJournal
    ledger: Ledger
    runners: dict[str, SimRunner]
    # The policy each operation was submitted with (a broken wrapper cannot lie about it).
    policies: dict[str, tuple[ReplayPolicy, int]] = field(default_factory=dict)
    check_proofs: bool = True
    # What runners did with each (operation, attempt) Dispatch copy they received.
    dispatch_results: dict[tuple[str, int], list[str]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # Every store created durable (§6 proofs hold only within one of these).
    durable_stores: set[str] = field(default_factory=set)
    terminal_seen: dict[str, tuple[object, ...]] = field(default_factory=dict)
    starts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # Issue 9: the scheduler's capacity and fairness rules (scheduled schedules).
    scheduling: SchedulingChecker | None = None
    # §11: the runner set's rules (membership schedules).
    membership: MembershipChecker | None = None
    # Every (operation, attempt) whose Dispatch a coordinator put on the wire.
    sent: set[tuple[str, int]] = field(default_factory=set)
    grants: int = 0
    contended_grants: int = 0
    _ledger_seen: int = 0
    # The executor each operation's envelope names (R14), as its Dispatches carry it.
    executors: dict[str, str] = field(default_factory=dict)
    # R15: first executions per operation (invariant 1 counts these: a retry of a
    # failure declared NONE is the same execution sequence), and retries made.
    first_starts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    retries: int = 0

    # --- hooks from the coordinator -----------------------------------------------

    def committed(self, change: Change, stored: OperationRecord, cause: Event) -> None:
        before, op = change.before, change.before.operation_id
        if before.state in _TERMINAL and (
            stored.state != before.state or _outcome(stored) != _outcome(before)
        ):
            raise Violation("6 terminal once", op, f"terminal {before.state} changed")
        if stored.state != before.state and stored.state not in PROTOCOL_EDGES[before.state]:
            raise Violation("6 legal edges", op, f"{before.state} -> {stored.state}")
        if self.membership is not None:
            self._check_membership(change, stored)
        if not self.check_proofs:
            return
        for update in change.attempt_updates:
            if update.outcome is AttemptOutcome.REFUSED:
                self._check_refused(op, update.number)
        if change.new_attempt is not None:
            self._check_new_attempt(change, stored)
        if stored.state is _S.PROTOCOL_ERROR and stored.error_reason == (
            "ACKNOWLEDGED_OPERATION_DISAPPEARED"
        ):
            self._check_disappeared(stored)

    def _check_membership(self, change: Change, stored: OperationRecord) -> None:
        assert self.membership is not None
        if change.new_attempt is not None:
            self.membership.attempt_written(stored.operation_id, change.new_attempt.number)
        newly = stored.state in _TERMINAL and change.before.state not in _TERMINAL
        if newly and stored.error_reason == "RUNNER_REMOVED":
            broken = self.membership.ended_removed(stored)
            if broken:
                raise Violation("§11 M6 removal", stored.operation_id, broken)

    def sending_dispatch(self, runner: str, request: DispatchRequest) -> None:
        self._check_attempt_row(runner, request, "sent")
        self.sent.add((request.operation_id, request.attempt))
        self.executors[request.operation_id] = request.executor
        if self.scheduling is not None:
            records = self.journal.operations.values()
            broken = self.scheduling.dispatch_sent(runner, request.operation_id, records)
            if broken:
                raise Violation("9 capacity", request.operation_id, broken)

    def granted(self, slot_class: tuple[str, TurnKind], principal: str, waiting: set[str]) -> None:
        self.grants += 1
        self.contended_grants += bool(waiting - {principal})
        if self.scheduling is not None:
            broken = self.scheduling.granted(slot_class, principal, waiting)
            if broken:
                raise Violation("9 fairness", principal, broken)

    # --- hooks from the runners -----------------------------------------------------

    def dispatch_delivered(self, runner: str, request: DispatchRequest, reply: object) -> None:
        self._check_attempt_row(runner, request, "delivered")
        outcome = type(reply).__name__
        if isinstance(reply, RefusedReply):
            outcome = f"refused:{reply.reason}"
        elif getattr(reply, "duplicate", False):
            outcome = "duplicate"
        self.dispatch_results[(request.operation_id, request.attempt)].append(outcome)

    @staticmethod
    def fencing_before(runner: SimRunner, request: object) -> int:
        """The highest token the runner's store has seen for the request's operation."""
        row = runner.store.rows.get(getattr(request, "operation_id", ""))
        return row.fencing_token if row is not None else 0

    def runner_replied(
        self, runner: SimRunner, request: object, highest: int, reply: object
    ) -> None:
        """§8.7: no runner accepts a token lower than the highest it has seen."""
        token = getattr(request, "fencing_token", None)
        if token is None or token >= highest or isinstance(reply, RefusedReply):
            return
        raise Violation(
            "7 fencing",
            getattr(request, "operation_id", "?"),
            f"{runner.name} answered {type(request).__name__} with token {token} "
            f"after seeing {highest}: {type(reply).__name__}",
        )

    # --- the rules --------------------------------------------------------------------

    def _check_attempt_row(self, runner: str, request: DispatchRequest, when: str) -> None:
        op = request.operation_id
        row = self.journal.attempts.get(op, {}).get(request.attempt)
        if (
            row is None
            or row.runner != runner
            or (row.incarnation_id != request.expected_incarnation_id)
        ):
            raise Violation(
                "5 write ahead",
                op,
                f"Dispatch attempt {request.attempt} {when} to {runner}/"
                f"{request.expected_incarnation_id} without its committed attempt row ({row})",
            )

    def _refused_unsent(self, op: str, number: int) -> bool:
        """Closed REFUSED and never put on the wire (§11 M6: its runner was not a member)."""
        row = self.journal.attempts.get(op, {}).get(number)
        unsent = (op, number) not in self.sent
        return unsent and row is not None and row.outcome is AttemptOutcome.REFUSED

    def _check_refused(self, op: str, number: int) -> None:
        if (op, number) not in self.sent:
            return  # never put on the wire: nothing of it reached any runner
        seen = self.dispatch_results.get((op, number), [])
        refused = [s for s in seen if s.startswith("refused:") and s[8:] in _DEFINITE]
        if not refused or len(refused) != len(seen):
            raise Violation(
                "4 proof",
                op,
                f"attempt {number} closed REFUSED but the runner saw it as {seen or 'nothing'}",
            )

    def _check_stale_run(self, op: str, number: int) -> None:
        """C6c: stale refusals are re-sent, but not for ever: no attempt follows a run
        of STALE_STREAK_LIMIT attempts the runners refused DISPATCH_STALE (judged from
        what they answered) and the coordinator knew were refused (its journal closed
        them REFUSED: a refusal whose reply was lost ends the run there too)."""
        run = 0
        for earlier in range(number - 1, 0, -1):
            attempt = self.journal.attempts[op].get(earlier)
            seen = self.dispatch_results.get((op, earlier), [])
            if attempt is None or attempt.outcome is not AttemptOutcome.REFUSED:
                break
            if not seen or any(s != "refused:DISPATCH_STALE" for s in seen):
                break
            run += 1
        if run >= STALE_STREAK_LIMIT:
            raise Violation("C6c bounded", op, f"attempt {number} after {run} stale refusals")

    def _check_new_attempt(self, change: Change, stored: OperationRecord) -> None:
        new = change.new_attempt
        assert new is not None
        op = new.operation_id
        policy, max_attempts = self.policies[op]
        # Issue 9, C6c: an attempt the runner refused only for being full, or as
        # stale, does not count (judged from what the runner answered, not from
        # the journal).
        full = sum(
            1
            for number in range(1, new.number)
            if self._refused_unsent(op, number)  # never sent (§11 M6): not counted
            or (
                (seen := self.dispatch_results.get((op, number), []))
                and all(s in _UNCOUNTED for s in seen)
            )
        )
        if new.number - full > max_attempts:
            raise Violation(
                "max_attempts",
                op,
                f"attempt {new.number} ({new.number - full} counted) > {max_attempts}",
            )
        self._check_stale_run(op, new.number)
        if policy is ReplayPolicy.SAFE:
            return
        earlier = [a for a in self.journal.attempts[op].values() if a.number < new.number]
        for attempt in earlier:
            if attempt.outcome is AttemptOutcome.REFUSED:
                continue  # checked against the runner's side when it was closed
            if policy is ReplayPolicy.NEVER_AUTOMATIC:
                raise Violation(
                    "4 proof",
                    op,
                    f"NEVER_AUTOMATIC replayed (attempt {new.number}) after attempt "
                    f"{attempt.number} ({attempt.outcome}) may have been delivered",
                )
            same_incarnation = attempt.incarnation_id == new.incarnation_id
            same_durable_store = (
                attempt.store_id is not None
                and attempt.store_id == new.store_id
                and attempt.store_id in self.durable_stores
            )
            if attempt.runner != new.runner or not (same_incarnation or same_durable_store):
                raise Violation(
                    "4 proof",
                    op,
                    f"attempt {new.number} -> {new.runner}/{new.incarnation_id} (store "
                    f"{new.store_id}) after unresolved attempt {attempt.number} -> "
                    f"{attempt.runner}/{attempt.incarnation_id} (store {attempt.store_id}, "
                    f"{attempt.outcome}) with no proof it cannot run",
                )

    def _check_disappeared(self, record: OperationRecord) -> None:
        runner = self.runners.get(record.runner or "")
        if runner is None:
            return
        if runner.incarnation_id == record.incarnation_id and (
            record.operation_id in runner.store.rows
        ):
            raise Violation(
                "3 true status",
                record.operation_id,
                f"PROTOCOL_ERROR ACKNOWLEDGED_OPERATION_DISAPPEARED but {record.runner}/"
                f"{record.incarnation_id} still holds the row "
                f"({runner.store.rows[record.operation_id].state})",
            )

    def after_step(self) -> None:
        """Invariants 1, 3 and 6 over the whole world, after every step."""
        for entry in self.ledger.entries[self._ledger_seen :]:
            self.starts[entry.operation_id] += 1
            if entry.number > 1:
                self._check_retry(entry)
                continue
            if entry.intent_number != 1:
                # R3: the row held the launch intent of execution 1 when it started
                # (its own write, or since issue 27 its admission's).
                raise Violation(
                    "R3 intent",
                    entry.operation_id,
                    f"started on {entry.runner}/{entry.incarnation_id} with no launch "
                    "intent on its row",
                )
            self.first_starts[entry.operation_id] += 1
            executor = self.executors.get(entry.operation_id) or "default"
            if executor not in served_executors(entry.runner):
                raise Violation(
                    "R14 executor",
                    entry.operation_id,
                    f"started on {entry.runner}, which does not serve executor {executor!r}",
                )
            policy, max_attempts = self.policies[entry.operation_id]
            allowed = max_attempts if policy is ReplayPolicy.SAFE else 1
            if self.first_starts[entry.operation_id] > allowed:
                raise Violation(
                    "1 at most once",
                    entry.operation_id,
                    f"executor start #{self.first_starts[entry.operation_id]} "
                    f"(on {entry.runner}/{entry.incarnation_id}, attempt {entry.attempt}); "
                    f"allowed {allowed}",
                )
        self._ledger_seen = len(self.ledger.entries)
        self._check_running_retries()
        for op, record in self.journal.operations.items():
            self._check_execution_truth(op, record)
            if self.policies[op][0] is not ReplayPolicy.SAFE:
                # SAFE may run on several rows (its submitter said so): each row
                # records its own executions, and a restored store forgets a row.
                check_recorded_executions(self.ledger, op, record)
        for runner in self.runners.values():
            for row in runner.store.rows.values():
                self._check_heartbeat_stop(row)

    def _check_retry(self, entry: ExecutionEntry) -> None:
        """R15: a later execution of one job only after its previous one ended FAILED
        with declared effect NONE, never overlapping it, within 1 + max_retries,
        each with its own launch intent."""
        op = entry.operation_id
        self.retries += 1
        policy = turn_retry(op)
        if policy is None or entry.number > policy.max_executions:
            allowed = policy.max_executions if policy is not None else 1
            raise Violation("R15 retries", op, f"execution {entry.number}; at most {allowed}")
        previous = [
            e
            for e in self.ledger.starts(op)
            if e.incarnation_id == entry.incarnation_id
            and e.number == entry.number - 1
            and e.index < entry.index
        ]
        if not previous:
            raise Violation("R15 retries", op, f"execution {entry.number} with no execution before")
        before = previous[-1]
        if before.outcome is None:
            raise Violation(
                "R15 overlap", op, f"execution {entry.number} started while {before.number} runs"
            )
        if (before.outcome, before.effect) != ("failed", "NONE"):
            raise Violation(
                "R15 effect",
                op,
                f"execution {entry.number} after execution {before.number} ended "
                f"{before.outcome} effect {before.effect or 'not declared'}",
            )
        if entry.intent_number != entry.number:
            raise Violation(
                "R15 intent",
                op,
                f"execution {entry.number} started; the row's latest record is "
                f"{entry.intent_number}",
            )

    def _check_running_retries(self) -> None:
        """R15: never two executions of one job at once (checked each step)."""
        live: dict[tuple[str, str], int] = defaultdict(int)
        for entry in self.ledger.entries:
            if entry.outcome is None:
                live[(entry.operation_id, entry.incarnation_id)] += 1
        for (op, incarnation), count in live.items():
            if count > 1:
                raise Violation("R15 overlap", op, f"{count} executions running on {incarnation}")

    @staticmethod
    def _check_heartbeat_stop(row: OperationRow) -> None:
        """R12: a turn its heartbeat stopped settles TIMED_OUT, execution STARTED."""
        if row.settled and row.stop_reason is StopReason.HEARTBEAT:
            outcome = (row.state, row.execution, row.error.reason if row.error else "")
            if outcome != (RowState.TIMED_OUT, Execution.STARTED, "HEARTBEAT_TIMEOUT"):
                raise Violation("R12 heartbeat", row.operation_id, f"settled {outcome}")

    def _check_execution_truth(self, op: str, record: OperationRecord) -> None:
        started = self.starts.get(op, 0)
        if record.execution is Execution.NOT_STARTED and started:
            raise Violation("3 execution", op, f"{record.state} says NOT_STARTED; {started} ran")
        if record.execution is Execution.STARTED and not started:
            raise Violation("3 execution", op, f"{record.state} says STARTED; no executor started")
        if record.state is _S.SUCCEEDED:
            wins = [
                e
                for e in self.ledger.starts(op)
                if e.outcome == "succeeded" and e.output == record.result
            ]
            if not wins:
                raise Violation(
                    "3 succeeded", op, f"SUCCEEDED with result {record.result!r}, no such run"
                )
        if record.state in (_S.FAILED, _S.CANCELLED) and self.policies[op][0] is not (
            ReplayPolicy.SAFE
        ):
            won = [e.index for e in self.ledger.starts(op) if e.outcome == "succeeded"]
            if won:
                raise Violation(
                    "3 true status", op, f"{record.state} but execution #{won[0]} succeeded"
                )
        if record.state in _TERMINAL:
            snapshot = _outcome(record)
            first = self.terminal_seen.setdefault(op, snapshot)
            if first != snapshot:
                raise Violation("6 terminal once", op, f"terminal outcome {first} -> {snapshot}")

    def healed(self) -> None:
        """Invariant 2: once the network heals, every operation is terminal."""
        for op, record in self.journal.operations.items():
            if not record.state.terminal:
                raise Violation("2 terminal after heal", op, f"still {record.state}")


# Terminal states the coordinator takes from a settled runner row: its execution
# records are then final and complete (R15).
_FROM_SETTLED_ROW = frozenset(
    {
        "",
        "EXECUTOR_FAILED",
        "RESULT_INVALID",
        "EXECUTOR_UNAVAILABLE",
        "CANCELLED",
        "SHUTDOWN",
        "DEADLINE_EXCEEDED",
        "BUDGET_EXHAUSTED",
        "HEARTBEAT_TIMEOUT",
    }
)


def check_recorded_executions(ledger: Ledger, op: str, record: OperationRecord) -> None:
    """R15: the coordinator's terminal status is true about executions. It never
    claims more started executions than ran where it was bound, and, taken from a
    settled row, records every one that ran there (a second billable execution is
    never hidden)."""
    if not record.state.terminal or record.executions is None:
        return
    records = executions_json.loads(record.executions.decode())
    if record.execution_count != len(records):
        raise Violation("R15 status", op, f"count {record.execution_count}, {len(records)} records")
    ran = [
        e
        for e in ledger.starts(op)
        if (
            e.store_id == record.store_id
            if record.store_id
            else e.incarnation_id == record.incarnation_id
        )
    ]
    started = sum(1 for r in records if r.execution is Execution.STARTED)
    if started > len(ran):
        raise Violation("R15 status", op, f"{started} executions recorded started, {len(ran)} ran")
    settled_row = record.state in (_S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.TIMED_OUT)
    if settled_row and (record.error_reason or "") in _FROM_SETTLED_ROW and len(ran) > len(records):
        raise Violation(
            "R15 status", op, f"{record.state} records {len(records)} executions; {len(ran)} ran"
        )


def _outcome(record: OperationRecord) -> tuple[object, ...]:
    return tuple(getattr(record, name) for name in _OUTCOME_FIELDS)
