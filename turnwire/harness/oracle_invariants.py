"""PROTOCOL.md §8 invariants 1-6, each a pure function of a run's records.

Every check returns the violations it found; an empty list means the
history it read keeps the invariant. The checks judge histories the code
should never produce, so they trust nothing the code asserts about itself:
they compare what the journal says with what the runners stored and what the
metered ledger saw start.

Assumption: every turn of the run executed through the ``metered`` executor,
so the ledger over-approximates executor starts (a start the runner never
confirmed still has its line). "Executions" below means ledger lines.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from turnwire.common.v1 import turn_pb2
from turnwire.harness import oracle_schema as names
from turnwire.harness.oracle_history import (
    JournalAttempt,
    JournalEvent,
    OperationHistory,
    RunnerResult,
    RunnerRow,
    RunRecord,
    utc,
)
from turnwire.ledger import LedgerEntry


@dataclass(frozen=True)
class Violation:
    """One broken invariant (1-6 of PROTOCOL.md §8) for one operation."""

    invariant: int
    operation_id: str
    message: str


def execution_limit(history: OperationHistory) -> int:
    """Executions the submitter allowed: one, or max_attempts under SAFE (§3)."""
    op = history.operation
    return max(op.max_attempts, 1) if op.replay_policy == names.SAFE else 1


# --- 1. at most one execution start per operation ------------------------------


def first_executions(history: OperationHistory) -> list[LedgerEntry]:
    """The ledger's starts of a row's first execution. A retry inside the row
    (PROTOCOL.md R15, after a failure declared effect NONE) is the same attempt's
    execution 2, 3, ... on the incarnation that ran the first: not another start."""
    firsts = {(e.incarnation_id, e.attempt) for e in history.ledger if e.execution <= 1}
    return [
        e for e in history.ledger if e.execution <= 1 or (e.incarnation_id, e.attempt) not in firsts
    ]


def at_most_one_start(history: OperationHistory) -> list[Violation]:
    oid = history.operation_id
    found: list[Violation] = []
    starts = len(first_executions(history))
    limit = execution_limit(history)
    if starts > limit:
        allowed = f"SAFE, max_attempts={limit}" if limit > 1 else "at most 1"
        found.append(Violation(1, oid, f"{starts} executor starts in the ledger ({allowed})"))
    # Even SAFE allows one start per attempt: the same attempt twice is a duplicate.
    per_attempt = Counter((e.incarnation_id, e.attempt) for e in first_executions(history))
    for (incarnation, attempt), count in sorted(per_attempt.items()):
        if count > 1 and limit > 1:
            found.append(
                Violation(1, oid, f"attempt {attempt} started {count} times on {incarnation}")
            )
    return found


# --- 2. nothing lost after heal -------------------------------------------------


def nothing_lost(history: OperationHistory, *, healed: bool) -> list[Violation]:
    op = history.operation
    if op.state in names.TERMINAL_STATES:
        return []
    if healed:
        return [Violation(2, op.operation_id, f"not terminal after heal: still {op.state}")]
    last = history.events[-1] if history.events else None
    if last is None or not (last.reason or last.detail or op.error_reason):
        return [Violation(2, op.operation_id, f"{op.state} with no visible reason")]
    return []


def is_lost(history: OperationHistory, *, healed: bool) -> bool:
    return bool(nothing_lost(history, healed=healed))


# --- 3. SUCCEEDED is true, execution is true ------------------------------------


def _journal_result(data: bytes | None) -> RunnerResult | None:
    if data is None:
        return None
    message = turn_pb2.TurnResult.FromString(data)
    return RunnerResult(
        output=message.output,
        content_type=message.content_type,
        metadata=tuple(sorted(message.metadata.items())),
    )


def true_outcome(history: OperationHistory) -> list[Violation]:
    op = history.operation
    oid = op.operation_id
    found: list[Violation] = []
    starts = len(history.ledger)
    safe = op.replay_policy == names.SAFE
    if op.execution == names.NOT_STARTED and starts:
        found.append(Violation(3, oid, f"execution NOT_STARTED but the ledger shows {starts}"))
    if op.execution == names.STARTED and not starts:
        found.append(Violation(3, oid, "execution STARTED but the ledger shows no start"))
    if op.state == names.SUCCEEDED:
        found += _succeeded(history, starts, safe)
    elif op.state in (names.FAILED, names.CANCELLED) and not safe:
        for row in history.runner_rows:
            if row.state == names.RUNNER_SUCCEEDED:
                found.append(Violation(3, oid, f"{op.state}, but {_where(row)} SUCCEEDED"))
    return found


def _succeeded(history: OperationHistory, starts: int, safe: bool) -> list[Violation]:
    op = history.operation
    oid = op.operation_id
    found: list[Violation] = []
    if starts == 0 or (starts > 1 and not safe):
        found.append(Violation(3, oid, f"SUCCEEDED with {starts} executions (expected 1)"))
    if op.execution != names.STARTED:
        found.append(Violation(3, oid, f"SUCCEEDED with execution {op.execution}"))
    if op.result is None:
        found.append(Violation(3, oid, "SUCCEEDED without a recorded result"))
    try:
        recorded = _journal_result(op.result)
    except DecodeError:
        return [*found, Violation(3, oid, "the recorded result does not parse as a TurnResult")]
    for row in history.runner_rows:
        if row.state in names.RUNNER_OUTCOMES and row.state != names.RUNNER_SUCCEEDED and not safe:
            found.append(Violation(3, oid, f"SUCCEEDED, but {_where(row)} says {row.state}"))
        if row.result is not None and recorded is not None and row.result != recorded:
            found.append(Violation(3, oid, f"recorded result differs from {_where(row)}'s"))
    return found


def _where(row: RunnerRow) -> str:
    return f"runner store {row.store_path} (incarnation {row.incarnation_id})"


# --- 4. every later attempt has a proof -----------------------------------------


def dispatch_event(history: OperationHistory, number: int) -> JournalEvent | None:
    """The DISPATCHING event that committed attempt ``number`` (C4)."""
    prefix = names.dispatch_detail_prefix(number)
    for event in history.events:
        if event.to_state == names.DISPATCHING and event.detail.startswith(prefix):
            return event
    return None


def _covers(earlier: JournalAttempt, later: JournalAttempt) -> bool:
    """``later`` is bound where an absence proof also speaks for ``earlier``:
    the same incarnation (C8), or the same durable store (§6)."""
    if earlier.runner != later.runner:
        return False
    if earlier.incarnation_id == later.incarnation_id:
        return True
    return bool(later.store_id) and earlier.store_id == later.store_id


def is_replay(history: OperationHistory, attempt: JournalAttempt) -> bool:
    """An attempt sent after one that was not definitely refused."""
    return any(a.number < attempt.number and a.outcome != names.REFUSED for a in history.attempts)


def proof_before_replay(history: OperationHistory) -> list[Violation]:
    found: list[Violation] = []
    for attempt in history.attempts:
        if attempt.number < 2 or not is_replay(history, attempt):
            continue  # the first attempt, or every earlier one was refused (C6)
        problem = _replay_problem(history, attempt)
        if problem:
            found.append(Violation(4, history.operation_id, f"attempt {attempt.number}: {problem}"))
    return found


def _replay_problem(history: OperationHistory, attempt: JournalAttempt) -> str:
    if history.operation.replay_policy == names.SAFE:
        return ""
    event = dispatch_event(history, attempt.number)
    if event is None:
        return "no DISPATCHING event records it"
    if f"/{attempt.incarnation_id}: " not in event.detail:
        return f"its event names another incarnation than {attempt.incarnation_id}"
    if not any(phrase in event.detail for phrase in names.ABSENCE_PROOF_PHRASES):
        return f"sent after an unrefused attempt without an absence proof ({event.detail!r})"
    for earlier in history.attempts:
        if earlier.number >= attempt.number or earlier.outcome == names.REFUSED:
            continue
        if not _covers(earlier, attempt):
            return (
                f"attempt {earlier.number} ({earlier.outcome}) went to "
                f"{earlier.runner}/{earlier.incarnation_id}; an absence on "
                f"{attempt.runner}/{attempt.incarnation_id} proves nothing about it"
            )
    return ""


# --- 5. attempts committed before the runner saw them ----------------------------


def attempt_before_runner(history: OperationHistory, *, clock_skew: float) -> list[Violation]:
    found: list[Violation] = []
    for row in history.runner_rows:
        if row.state == names.RUNNER_TOMBSTONED or row.accepted_at is None:
            continue  # a Cancel wrote it; no Dispatch was received
        problem = _row_problem(history, row, clock_skew)
        if problem:
            found.append(Violation(5, history.operation_id, problem))
    for entry in history.ledger:
        problem = _ledger_problem(history, entry, clock_skew)
        if problem:
            found.append(Violation(5, history.operation_id, problem))
    return found


def _attempt(history: OperationHistory, number: int) -> JournalAttempt | None:
    return next((a for a in history.attempts if a.number == number), None)


def _row_problem(history: OperationHistory, row: RunnerRow, clock_skew: float) -> str:
    where = _where(row)
    attempt = _attempt(history, row.attempt)
    if attempt is None:
        return f"{where} accepted attempt {row.attempt}, which the journal never recorded"
    # A never-launched row settled by a later incarnation of the same store
    # names the settler; the attempt went to the incarnation that accepted it.
    never_launched = row.started_at is None and row.state in names.RUNNER_NEVER_LAUNCHED_OUTCOMES
    same_store = attempt.store_id is not None and attempt.store_id == row.store_id
    if attempt.incarnation_id != row.incarnation_id and not (never_launched and same_store):
        return (
            f"{where} holds attempt {row.attempt}, but the journal sent it to "
            f"{attempt.runner}/{attempt.incarnation_id}"
        )
    assert row.accepted_at is not None
    if attempt.sent_at.timestamp() > row.accepted_at + clock_skew:
        return (
            f"{where} accepted attempt {row.attempt} at {row.accepted_at:.6f}, before the "
            f"journal recorded it as sent ({attempt.sent_at.isoformat()})"
        )
    return ""


def _ledger_problem(history: OperationHistory, entry: LedgerEntry, clock_skew: float) -> str:
    attempt = _attempt(history, entry.attempt)
    what = f"ledger start of attempt {entry.attempt} on {entry.incarnation_id}"
    if attempt is None:
        return f"{what}: the journal never recorded that attempt"
    if attempt.incarnation_id != entry.incarnation_id:
        return f"{what}: the journal sent it to {attempt.runner}/{attempt.incarnation_id}"
    try:
        started = _iso_seconds(entry.started_at)
    except ValueError:
        return f"{what}: unreadable start time {entry.started_at!r}"
    if attempt.sent_at.timestamp() > started + clock_skew:
        return f"{what} at {entry.started_at}, before it was recorded as sent"
    return ""


def _iso_seconds(text: str) -> float:
    return utc(text).timestamp()


# --- 6. legal edges, contiguous sequences, terminal is final ----------------------


def legal_event_log(history: OperationHistory) -> list[Violation]:
    op = history.operation
    oid = op.operation_id
    if not history.events:
        return [Violation(6, oid, "no events: the operation has no history")]
    found: list[Violation] = []
    previous: str | None = None
    for expected, event in enumerate(history.events, start=1):
        if event.sequence != expected:
            found.append(Violation(6, oid, f"event sequence {event.sequence}, expected {expected}"))
        found += _edge_problems(oid, previous, event)
        previous = event.to_state
    last = history.events[-1]
    if op.state != last.to_state:
        found.append(Violation(6, oid, f"current state {op.state}, last event {last.to_state}"))
    if op.last_event_sequence != last.sequence:
        found.append(
            Violation(
                6, oid, f"last_event_sequence {op.last_event_sequence}, last event {last.sequence}"
            )
        )
    return found


def _edge_problems(oid: str, previous: str | None, event: JournalEvent) -> list[Violation]:
    seq = event.sequence
    if previous is None:
        if event.from_state is not None or event.to_state not in names.FIRST_STATES:
            return [Violation(6, oid, f"first event {event.from_state} -> {event.to_state}")]
        return []
    if previous in names.TERMINAL_STATES:
        return [Violation(6, oid, f"event {seq} after terminal {previous}: -> {event.to_state}")]
    found: list[Violation] = []
    if event.from_state != previous:
        found.append(
            Violation(6, oid, f"event {seq} starts at {event.from_state}, state was {previous}")
        )
    source = event.from_state or previous
    if event.to_state not in names.LEGAL_EDGES.get(source, frozenset()):
        found.append(Violation(6, oid, f"event {seq}: illegal edge {source} -> {event.to_state}"))
    return found


# --- what no operation owns ---------------------------------------------------


def orphans(run: RunRecord) -> list[Violation]:
    """Runner rows and starts of operations the journal never accepted (5: no attempt row)."""
    found = [
        Violation(
            5, row.operation_id, f"{_where(row)} holds an operation the journal never accepted"
        )
        for row in run.orphan_rows
        if row.state != names.RUNNER_TOMBSTONED
    ]
    found += [
        Violation(5, entry.operation_id, "the ledger shows a start of an unknown operation")
        for entry in run.orphan_ledger
    ]
    return found
