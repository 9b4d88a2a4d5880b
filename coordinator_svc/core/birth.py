"""An operation's birth: its first record and first event, written one way (C1).

Acceptance (SubmitTurn), an operator's requeue (V6) and the tests all make a
new operation; each used to spell out the QUEUED record by hand, and a field
added to the record had to be remembered in four places. Here it is decided
once: ``QUEUED``, never attempted, ``NOT_STARTED`` (nothing was sent, C14),
due at once, and event 1 saying how it came to be.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from coordinator_svc.core.model import (
    EventRecord,
    Execution,
    OperationRecord,
    OpState,
    ReplayPolicy,
    TurnKind,
)


@dataclass(frozen=True)
class Birth:
    """What a new operation is made of; everything else starts empty."""

    operation_id: str
    principal: str
    idempotency_key_digest: str
    request_digest: str
    envelope: bytes
    pool: str
    kind: TurnKind
    replay_policy: ReplayPolicy
    max_attempts: int


def born(
    birth: Birth, at: datetime, detail: str = "accepted"
) -> tuple[OperationRecord, EventRecord]:
    """C1: the QUEUED record and its first event (sequence 1), for journal.submit.

    ``detail`` is event 1's account of where the operation came from
    ("accepted", or a requeue's "requeued from ... by ...: why", V6)."""
    record = OperationRecord(
        operation_id=birth.operation_id,
        principal=birth.principal,
        idempotency_key_digest=birth.idempotency_key_digest,
        request_digest=birth.request_digest,
        envelope=birth.envelope,
        envelope_digest=hashlib.sha256(birth.envelope).hexdigest(),
        pool=birth.pool,
        kind=birth.kind,
        replay_policy=birth.replay_policy,
        max_attempts=birth.max_attempts,
        state=OpState.QUEUED,
        execution=Execution.NOT_STARTED,
        created_at=at,
        updated_at=at,
        next_action_at=at,
        last_event_sequence=1,
    )
    event = EventRecord(
        operation_id=birth.operation_id,
        sequence=1,
        from_state=None,
        to_state=OpState.QUEUED,
        execution=Execution.NOT_STARTED,
        at=at,
        detail=detail,
    )
    return record, event
