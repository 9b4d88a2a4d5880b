"""C1: every new operation (acceptance, an operator's requeue, the test rigs) is
born from one function, QUEUED, never attempted, NOT_STARTED, with event 1."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from coordinator_svc.core.birth import Birth, born
from coordinator_svc.core.model import Execution, OpState, ReplayPolicy, TurnKind

AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
BIRTH = Birth(
    operation_id="op-1",
    principal="alice",
    idempotency_key_digest="k" * 64,
    request_digest="r" * 64,
    envelope=b"an envelope",
    pool="gpu",
    kind=TurnKind.READ_ONLY,
    replay_policy=ReplayPolicy.NEVER_AUTOMATIC,
    max_attempts=3,
)


@pytest.mark.rule("C1", "C14")
def test_a_new_operation_is_queued_never_attempted_and_not_started() -> None:
    record, event = born(BIRTH, AT)
    assert (record.state, record.execution, record.attempt_count) == (
        OpState.QUEUED,
        Execution.NOT_STARTED,
        0,
    )
    assert record.envelope_digest == hashlib.sha256(b"an envelope").hexdigest()
    assert (record.pool, record.kind, record.replay_policy, record.max_attempts) == (
        "gpu",
        TurnKind.READ_ONLY,
        ReplayPolicy.NEVER_AUTOMATIC,
        3,
    )
    assert record.created_at == record.updated_at == record.next_action_at == AT
    assert record.runner is None and record.lease_owner is None and not record.cancel_requested
    assert record.last_event_sequence == event.sequence == 1
    assert (event.from_state, event.to_state, event.execution, event.detail) == (
        None,
        OpState.QUEUED,
        Execution.NOT_STARTED,
        "accepted",
    )


@pytest.mark.rule("V6")
def test_a_requeue_says_where_it_came_from_in_event_one() -> None:
    _, event = born(BIRTH, AT, detail="requeued from op-0 by ops: verified not run")
    assert event.detail == "requeued from op-0 by ops: verified not run"
