"""The oracle's view of a finished run: plain frozen records, joined per operation.

Nothing here reads a database; ``oracle_load`` fills these from the journal,
the runner stores and the ledger, and tests may build them directly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from turnwire.ledger import LedgerEntry


@dataclass(frozen=True)
class JournalOperation:
    """The coordinator's current-state row of one operation."""

    operation_id: str
    state: str
    execution: str
    replay_policy: str
    max_attempts: int
    attempt_count: int
    runner: str | None
    incarnation_id: str | None
    store_id: str | None
    result: bytes | None  # serialized turnwire.common.v1.TurnResult
    error_reason: str | None
    error_message: str | None
    last_event_sequence: int


@dataclass(frozen=True)
class JournalAttempt:
    operation_id: str
    number: int
    runner: str
    incarnation_id: str
    store_id: str | None
    sent_at: datetime  # UTC
    outcome: str
    detail: str


@dataclass(frozen=True)
class JournalEvent:
    operation_id: str
    sequence: int
    from_state: str | None
    to_state: str
    execution: str
    at: datetime  # UTC
    reason: str
    detail: str


@dataclass(frozen=True)
class RunnerResult:
    output: bytes
    content_type: str
    metadata: tuple[tuple[str, str], ...]  # sorted pairs


@dataclass(frozen=True)
class RunnerRow:
    """One row of one runner store (one row per operation per store, §6)."""

    store_path: str
    store_id: str
    operation_id: str
    state: str
    execution: str
    incarnation_id: str
    attempt: int
    result: RunnerResult | None
    error_reason: str | None
    released: bool
    accepted_at: float | None  # unix seconds
    started_at: float | None
    settled_at: float | None


@dataclass(frozen=True)
class RunnerStore:
    path: str
    store_id: str
    rows: tuple[RunnerRow, ...]


@dataclass(frozen=True)
class OperationHistory:
    """Everything the run left about one operation the journal accepted."""

    operation: JournalOperation
    events: tuple[JournalEvent, ...]  # by sequence
    attempts: tuple[JournalAttempt, ...]  # by number
    runner_rows: tuple[RunnerRow, ...]
    ledger: tuple[LedgerEntry, ...]  # in ledger order

    @property
    def operation_id(self) -> str:
        return self.operation.operation_id


@dataclass(frozen=True)
class RunRecord:
    """The whole run: one history per journal operation, plus what no operation owns."""

    histories: Mapping[str, OperationHistory]
    stores: tuple[RunnerStore, ...]
    # Runner rows and ledger lines naming an operation the journal never accepted.
    orphan_rows: tuple[RunnerRow, ...]
    orphan_ledger: tuple[LedgerEntry, ...]
    ledger_lines: int


def assemble(
    operations: Iterable[JournalOperation],
    attempts: Iterable[JournalAttempt],
    events: Iterable[JournalEvent],
    stores: Iterable[RunnerStore],
    ledger: Iterable[LedgerEntry],
) -> RunRecord:
    """Join the three sources by operation id."""
    events_by: dict[str, list[JournalEvent]] = defaultdict(list)
    for event in events:
        events_by[event.operation_id].append(event)
    attempts_by: dict[str, list[JournalAttempt]] = defaultdict(list)
    for attempt in attempts:
        attempts_by[attempt.operation_id].append(attempt)
    stores = tuple(stores)
    rows_by: dict[str, list[RunnerRow]] = defaultdict(list)
    for store in stores:
        for row in store.rows:
            rows_by[row.operation_id].append(row)
    ledger = tuple(ledger)
    ledger_by: dict[str, list[LedgerEntry]] = defaultdict(list)
    for entry in ledger:
        ledger_by[entry.operation_id].append(entry)
    histories = {
        op.operation_id: OperationHistory(
            operation=op,
            events=tuple(sorted(events_by[op.operation_id], key=lambda e: e.sequence)),
            attempts=tuple(sorted(attempts_by[op.operation_id], key=lambda a: a.number)),
            runner_rows=tuple(rows_by[op.operation_id]),
            ledger=tuple(ledger_by[op.operation_id]),
        )
        for op in sorted(operations, key=lambda o: o.operation_id)
    }
    return RunRecord(
        histories=histories,
        stores=stores,
        orphan_rows=tuple(
            row for oid, rows in rows_by.items() if oid not in histories for row in rows
        ),
        orphan_ledger=tuple(entry for entry in ledger if entry.operation_id not in histories),
        ledger_lines=len(ledger),
    )


def utc(value: object) -> datetime:
    """A stored timestamp as an aware UTC datetime (SQLite keeps naive UTC text).

    Raises ValueError for anything else.
    """
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise ValueError(f"not a timestamp: {value!r}")
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)
