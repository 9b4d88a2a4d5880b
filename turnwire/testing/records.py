"""Builders for journal records: valid by default, override what a case pins.

The conformance cases write with these; a case of your own can too. Times
start at ``T0`` (timezone-aware, with microseconds, so a backend that drops
either is caught), ids are ``op-0001`` and up, and every digest is a real
sha256.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

from coordinator_svc.core.model import (
    AttemptRecord,
    AttemptUpdate,
    Change,
    EventRecord,
    Execution,
    OperationRecord,
    OpState,
    ReplayPolicy,
    TurnKind,
)
from coordinator_svc.ports import Journal

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def new_operation(
    number: int = 1,
    *,
    principal: str = "alice",
    key: str | None = None,
    request: str | None = None,
    created_at: datetime | None = None,
    **fields: Any,
) -> OperationRecord:
    """Operation ``op-<number>``: QUEUED, created ``number`` seconds after T0."""
    created = created_at if created_at is not None else T0 + timedelta(seconds=number)
    envelope = f"envelope {number}".encode() + bytes(range(256))
    values: dict[str, Any] = {
        "operation_id": f"op-{number:04d}",
        "principal": principal,
        "idempotency_key_digest": digest(key if key is not None else f"key-{number}"),
        "request_digest": digest(request if request is not None else f"request-{number}"),
        "envelope": envelope,
        "envelope_digest": hashlib.sha256(envelope).hexdigest(),
        "pool": "default",
        "kind": TurnKind.WRITABLE,
        "replay_policy": ReplayPolicy.PROBE_FIRST,
        "max_attempts": 5,
        "state": OpState.QUEUED,
        "execution": Execution.NOT_STARTED,
        "created_at": created,
        "updated_at": created,
    }
    values.update(fields)
    return OperationRecord(**values)


def first_event(operation: OperationRecord) -> EventRecord:
    """Event 1 of ``operation``: None -> its state (C1)."""
    return EventRecord(
        operation_id=operation.operation_id,
        sequence=1,
        from_state=None,
        to_state=operation.state,
        execution=operation.execution,
        at=operation.created_at,
        reason="ACCEPTED",
    )


async def submitted(journal: Journal, number: int = 1, **fields: Any) -> OperationRecord:
    """Submit ``new_operation(number, **fields)`` with its first event; the stored row."""
    operation = new_operation(number, **fields)
    stored, replay = await journal.submit(operation, first_event(operation))
    assert not replay
    return stored


def transition(
    before: OperationRecord,
    to_state: OpState,
    *,
    at: datetime | None = None,
    reason: str = "",
    new_attempt: AttemptRecord | None = None,
    attempt_updates: tuple[AttemptUpdate, ...] = (),
    **fields: Any,
) -> Change:
    """A Change moving ``before`` to ``to_state`` with a matching event."""
    when = at if at is not None else before.updated_at + timedelta(seconds=1)
    after = dataclasses.replace(before, state=to_state, updated_at=when, **fields)
    event = EventRecord(
        operation_id=before.operation_id,
        sequence=0,  # assigned by the journal
        from_state=before.state,
        to_state=to_state,
        execution=after.execution,
        at=when,
        reason=reason,
    )
    return Change(
        before=before,
        after=after,
        event=event,
        new_attempt=new_attempt,
        attempt_updates=attempt_updates,
    )


def dispatch(before: OperationRecord, runner: str = "runner-a") -> Change:
    """QUEUED/DISPATCH_UNKNOWN -> DISPATCHING with the next attempt written ahead (C4)."""
    number = before.attempt_count + 1
    sent_at = before.updated_at + timedelta(seconds=1)
    attempt = AttemptRecord(
        operation_id=before.operation_id,
        number=number,
        runner=runner,
        incarnation_id="a" * 32,
        store_id="store-1",
        sent_at=sent_at,
    )
    return transition(
        before,
        OpState.DISPATCHING,
        at=sent_at,
        new_attempt=attempt,
        attempt_count=number,
        last_attempt_at=sent_at,
        runner=runner,
        incarnation_id="a" * 32,
        store_id="store-1",
    )


def bookkeeping(before: OperationRecord, **fields: Any) -> Change:
    """A Change that writes fields but no state, so no event."""
    return Change(before=before, after=dataclasses.replace(before, **fields))
