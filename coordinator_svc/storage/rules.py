"""The journal's write rules, in one place so every adapter applies the same ones.

Pure functions: a submitted operation or a ``Change`` goes in, the exact rows
to store come out, or an error says what is wrong and nothing is written.
The adapters (``fake.FakeJournal``, ``sql.SqlJournal``) only add storage:
the compare-and-set, the transaction, the unique key.

Rules (PROTOCOL.md §2, C4, C10, C13, §5):

- Every datetime is timezone-aware and is stored as UTC.
- The journal assigns event sequences: the first event is 1, each later one
  ``before.last_event_sequence + 1``; the value the caller put in
  ``EventRecord.sequence`` is ignored. ``version`` is likewise assigned
  (``before.version + 1``).
- A state change must be a legal edge (``core.edges``) and must carry the
  event that explains it (``from_state = before.state``, ``to_state =
  after.state``); an event without a state change is refused (§8.6: the
  log holds only legal edges). A terminal state never changes, and neither do its outcome
  fields (execution, result, error, stop reason, finished_at); bookkeeping
  (``released``, lease, ``next_action_at``) may still be written.
- What was fixed at acceptance never changes: ids, digests, envelope, pool,
  kind, replay policy, max_attempts, created_at. ``fencing_token`` changes
  only through ``Journal.claim``.
- Attempt rows and ``attempt_count`` move together: a new attempt is number
  ``before.attempt_count + 1`` and ``after.attempt_count`` equals it; without
  a new attempt ``attempt_count`` does not change. Attempt updates name an
  existing attempt number.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from coordinator_svc.core.edges import assert_legal
from coordinator_svc.core.model import (
    AttemptRecord,
    Change,
    EventRecord,
    OperationRecord,
)
from coordinator_svc.core.ownership import lease_live
from coordinator_svc.ports import InvalidWrite

# Fixed at acceptance (C1): the envelope is never rebuilt, the key never moves.
IMMUTABLE_FIELDS = (
    "operation_id",
    "principal",
    "idempotency_key_digest",
    "request_digest",
    "envelope",
    "envelope_digest",
    "pool",
    "kind",
    "replay_policy",
    "max_attempts",
    "created_at",
)

# Written once with the terminal state (C10).
TERMINAL_OUTCOME_FIELDS = (
    "execution",
    "result",
    "error_reason",
    "error_message",
    "stop_reason",
    "finished_at",
    "executions",
    "execution_count",
)

_OPERATION_DATETIMES = (
    "created_at",
    "updated_at",
    "last_attempt_at",
    "lease_expires_at",
    "next_action_at",
    "unknown_since",
    "finished_at",
)


def as_utc(value: datetime, what: str) -> datetime:
    """``value`` in UTC; a naive datetime is refused (its zone is a guess)."""
    if value.tzinfo is UTC:
        return value  # the common case, as the coordinator makes them: no new object
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidWrite(f"{what} must be timezone-aware, got naive {value.isoformat()}")
    return value.astimezone(UTC)


def _operation_in_utc(record: OperationRecord) -> OperationRecord:
    updates: dict[str, datetime] = {}
    for name in _OPERATION_DATETIMES:
        value = getattr(record, name)
        if value is not None and value.tzinfo is not UTC:
            updates[name] = as_utc(value, f"{record.operation_id}.{name}")
    if not updates:
        return record  # all in UTC already (a record is immutable: no copy needed)
    return dataclasses.replace(record, **updates)  # type: ignore[arg-type]  # datetime-only fields


def event_in_utc(event: EventRecord, sequence: int) -> EventRecord:
    at = as_utc(event.at, f"event of {event.operation_id}")
    return dataclasses.replace(event, sequence=sequence, at=at)


def attempt_in_utc(attempt: AttemptRecord) -> AttemptRecord:
    sent_at = as_utc(attempt.sent_at, f"attempt {attempt.number} of {attempt.operation_id}")
    return dataclasses.replace(attempt, sent_at=sent_at)


def prepare_submit(
    operation: OperationRecord, first_event: EventRecord
) -> tuple[OperationRecord, EventRecord]:
    """The rows C1 stores: the operation (last_event_sequence 1) and event 1."""
    op_id = operation.operation_id
    if first_event.operation_id != op_id:
        raise InvalidWrite(f"first event names {first_event.operation_id}, not {op_id}")
    if first_event.from_state is not None or first_event.to_state != operation.state:
        raise InvalidWrite(
            f"{op_id}: the first event must go from None to {operation.state}, "
            f"got {first_event.from_state} -> {first_event.to_state}"
        )
    if operation.attempt_count != 0:
        raise InvalidWrite(f"{op_id}: a new operation has no attempts")
    stored = dataclasses.replace(_operation_in_utc(operation), last_event_sequence=1)
    return stored, event_in_utc(first_event, 1)


def _check_unchanged(
    before: OperationRecord, after: OperationRecord, names: tuple[str, ...]
) -> None:
    for name in names:
        if getattr(before, name) != getattr(after, name):
            raise InvalidWrite(f"{before.operation_id}: {name} cannot change here")


def _check_state_and_event(change: Change) -> None:
    before, after, event = change.before, change.after, change.event
    op_id = before.operation_id
    if after.state != before.state:
        assert_legal(op_id, before.state, after.state)
        if event is None:
            raise InvalidWrite(f"{op_id}: {before.state} -> {after.state} needs an event (C13)")
    else:
        if before.state.terminal:
            _check_unchanged(before, after, TERMINAL_OUTCOME_FIELDS)
        if event is not None:
            # §8.6: only legal edges appear in the event log, and X -> X is none.
            raise InvalidWrite(f"{op_id}: an event needs a state change, state stays {after.state}")
    if event is None:
        return
    if event.operation_id != op_id:
        raise InvalidWrite(f"event names {event.operation_id}, not {op_id}")
    if event.from_state != before.state or event.to_state != after.state:
        raise InvalidWrite(
            f"{op_id}: event says {event.from_state} -> {event.to_state}, "
            f"the change is {before.state} -> {after.state}"
        )


def _check_attempts(change: Change) -> None:
    before, after, attempt = change.before, change.after, change.new_attempt
    op_id = before.operation_id
    expected_count = before.attempt_count + (1 if attempt is not None else 0)
    if after.attempt_count != expected_count:
        raise InvalidWrite(
            f"{op_id}: attempt_count must be {expected_count}, got {after.attempt_count}"
        )
    if attempt is not None and (attempt.operation_id != op_id or attempt.number != expected_count):
        raise InvalidWrite(
            f"{op_id}: the new attempt must be number {expected_count} of {op_id}, "
            f"got number {attempt.number} of {attempt.operation_id}"
        )
    numbers = [update.number for update in change.attempt_updates]
    if len(set(numbers)) != len(numbers):
        raise InvalidWrite(f"{op_id}: attempt updates name one attempt twice: {numbers}")
    for number in numbers:
        if not 1 <= number <= after.attempt_count:
            raise InvalidWrite(f"{op_id}: there is no attempt number {number}")


def prepare_change(
    change: Change,
) -> tuple[OperationRecord, EventRecord | None, AttemptRecord | None]:
    """Validate ``change``; return the row, event and attempt exactly as stored."""
    before, after = change.before, change.after
    if after.operation_id != before.operation_id:
        raise InvalidWrite(f"change mixes {before.operation_id} and {after.operation_id}")
    _check_unchanged(before, after, IMMUTABLE_FIELDS)
    if after.fencing_token != before.fencing_token:
        raise InvalidWrite(f"{before.operation_id}: fencing_token changes only by claim (§5)")
    _check_state_and_event(change)
    _check_attempts(change)
    sequence = before.last_event_sequence + (1 if change.event is not None else 0)
    stored = dataclasses.replace(
        _operation_in_utc(after), version=before.version + 1, last_event_sequence=sequence
    )
    event = event_in_utc(change.event, sequence) if change.event is not None else None
    attempt = attempt_in_utc(change.new_attempt) if change.new_attempt is not None else None
    return stored, event, attempt


def check_lease_request(owner: str, ttl_seconds: float) -> None:
    if not owner:
        raise InvalidWrite("a lease owner must be a non-empty name")
    if not ttl_seconds > 0:
        raise InvalidWrite(f"lease ttl must be positive, got {ttl_seconds}")


def claimed(
    record: OperationRecord, owner: str, now: datetime, ttl_seconds: float
) -> OperationRecord | None:
    """The row after ``owner`` takes or renews the lease, or None if refused (§5).

    Refused while another owner's lease is live. Taking over another owner's
    expired lease increments ``fencing_token``; a first claim or a renewal
    keeps it. Every claim is a write, so ``version`` moves on.
    """
    check_lease_request(owner, ttl_seconds)
    now = as_utc(now, "claim time")
    previous = record.lease_owner
    if previous is not None and previous != owner and lease_live(record, now):
        return None
    takeover = previous is not None and previous != owner
    return dataclasses.replace(
        record,
        lease_owner=owner,
        lease_expires_at=now + timedelta(seconds=ttl_seconds),
        fencing_token=record.fencing_token + (1 if takeover else 0),
        version=record.version + 1,
    )


def is_due(record: OperationRecord, now: datetime) -> bool:
    """Journal.due's filter, for adapters that filter in Python."""
    if record.state.terminal:
        return not record.released
    return record.next_action_at is None or record.next_action_at <= now
