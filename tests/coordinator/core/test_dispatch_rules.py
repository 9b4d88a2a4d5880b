"""Dispatch replies in the pure core (C5, C6, C7, R2)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.decide import decide
from coordinator_svc.core.events import (
    DispatchAccepted,
    DispatchRefused,
    DispatchUnknown,
    Tick,
)
from coordinator_svc.core.model import AttemptOutcome, Execution, OpState
from coordinator_svc.core.runner_view import RunnerOpState as R
from tests.coordinator.core.scenario import (
    INC_A,
    INC_B,
    NOW,
    RUNNER,
    answer,
    attempt,
    attempts_after,
    bound,
    ctx,
    row,
    step,
)

PENDING_1 = attempt(1, AttemptOutcome.PENDING)
DEFINITE = [
    "INCARNATION_MISMATCH",
    "NO_FREE_SLOT",
    "SHUTTING_DOWN",
    "STORE_WRITE_FAILED",
    "STALE_FENCING_TOKEN",
]


def dispatching(attempts: int = 1, **fields: Any) -> Any:
    return bound(OpState.DISPATCHING, attempts, **fields)


@pytest.mark.rule("C5", "R3")
def test_accepted_running_row_acknowledges() -> None:
    """C5/R3: an acknowledged Dispatch moves DISPATCHING -> RUNNING and closes the attempt."""
    record, decision = step(
        dispatching(), DispatchAccepted(1, INC_A, row(R.ACCEPTED)), ctx(PENDING_1)
    )
    assert record.state is OpState.RUNNING and record.acknowledged
    assert record.execution is Execution.UNKNOWN  # accepted, not yet started (C14)
    assert decision.change is not None
    assert decision.change.attempt_updates[0].outcome is AttemptOutcome.ACCEPTED


@pytest.mark.rule("C10")
def test_accepted_with_a_finished_row_goes_terminal_directly() -> None:
    """C10 fast path: DISPATCHING -> SUCCEEDED in one commit, then Release."""
    done = row(R.SUCCEEDED, Execution.STARTED, result=b"r")
    record, decision = step(
        dispatching(), DispatchAccepted(1, INC_A, done, duplicate=True), ctx(PENDING_1)
    )
    assert record.state is OpState.SUCCEEDED and record.execution is Execution.STARTED
    assert decision.commands == (cmd.Release(RUNNER, INC_A, record.fencing_token),)


@pytest.mark.rule("R2")
def test_reply_with_another_envelope_digest_is_a_protocol_error() -> None:
    """R2: the runner's row must carry our envelope digest."""
    bad = dataclasses.replace(row(R.RUNNING, Execution.STARTED), envelope_digest="0" * 64)
    record, _ = step(dispatching(), DispatchAccepted(1, INC_A, bad), ctx(PENDING_1))
    assert record.state is OpState.PROTOCOL_ERROR
    assert record.error_reason == "ENVELOPE_MISMATCH"


@pytest.mark.rule("C6")
@pytest.mark.parametrize("reason", DEFINITE)
def test_definite_refusal_of_a_first_attempt_requeues_with_backoff(reason: str) -> None:
    """C6: a typed refusal of the only attempt: REFUSED, back to QUEUED unbound, backoff."""
    record, decision = step(dispatching(), DispatchRefused(1, reason, INC_A), ctx(PENDING_1))
    assert record.state is OpState.QUEUED
    assert (record.runner, record.incarnation_id, record.store_id) == (None, None, None)
    assert record.next_action_at is not None and record.next_action_at > NOW
    assert record.execution is Execution.NOT_STARTED
    assert decision.change is not None
    assert decision.change.attempt_updates[0].outcome is AttemptOutcome.REFUSED
    assert decision.commands == ()


@pytest.mark.rule("C6", "C8")
@pytest.mark.parametrize("reason", DEFINITE)
def test_refusal_after_an_unresolved_attempt_stays_bound_and_unknown(reason: str) -> None:
    """C6: an earlier attempt is unresolved: DISPATCH_UNKNOWN, same runner, C8 decides."""
    before = dispatching(2)
    record, decision = step(
        before,
        DispatchRefused(2, reason, INC_A),
        ctx(attempt(1), attempt(2, AttemptOutcome.PENDING)),
    )
    assert record.state is OpState.DISPATCH_UNKNOWN
    assert record.runner == RUNNER and record.incarnation_id == INC_A
    assert "ambiguous" in decision.tags
    if reason in ("NO_FREE_SLOT", "SHUTTING_DOWN"):
        # Issue 9: a full runner: wait with backoff (no hot loop), still bound.
        assert not decision.again
        assert record.next_action_at is not None and record.next_action_at > NOW
    else:
        assert decision.again


@pytest.mark.rule("C6", "C8")
def test_incarnation_mismatch_after_an_unresolved_attempt_ends_incarnation_changed() -> None:
    """C6 + C8: after INCARNATION_MISMATCH the preflight sees a new incarnation: TIMED_OUT."""
    rows = (attempt(1), attempt(2, AttemptOutcome.PENDING))
    refusal = DispatchRefused(2, "INCARNATION_MISMATCH", INC_B)
    unknown, decision = step(dispatching(2), refusal, ctx(*rows))
    rows = attempts_after(rows, decision)
    assert decide(unknown, Tick(), ctx(*rows)).commands == (cmd.Preflight(RUNNER),)
    final, decision = step(unknown, answer(None, incarnation=INC_B, asked=2), ctx(*rows))
    assert final.state is OpState.TIMED_OUT
    assert final.error_reason == "INCARNATION_CHANGED"
    assert final.execution is Execution.UNKNOWN
    assert decision.commands == ()


@pytest.mark.rule("C6", "C14")
def test_all_attempts_refused_keeps_not_started() -> None:
    """C6/C14: every attempt definitely refused: QUEUED again, NOT_STARTED."""
    rows = (attempt(1, AttemptOutcome.REFUSED), attempt(2, AttemptOutcome.PENDING))
    record, _ = step(dispatching(2), DispatchRefused(2, "NO_FREE_SLOT", INC_A), ctx(*rows))
    assert record.state is OpState.QUEUED and record.execution is Execution.NOT_STARTED


@pytest.mark.rule("R2", "C6")
def test_envelope_mismatch_is_a_protocol_error() -> None:
    """R2/C6: ENVELOPE_MISMATCH -> PROTOCOL_ERROR."""
    record, _ = step(dispatching(), DispatchRefused(1, "ENVELOPE_MISMATCH", INC_A), ctx(PENDING_1))
    assert record.state is OpState.PROTOCOL_ERROR
    assert record.error_reason == "ENVELOPE_MISMATCH"


@pytest.mark.rule("C6")
def test_envelope_invalid_is_rejected() -> None:
    """C6: ENVELOPE_INVALID -> REJECTED (DISPATCH_REJECTED), nothing ran."""
    record, _ = step(dispatching(), DispatchRefused(1, "ENVELOPE_INVALID", INC_A), ctx(PENDING_1))
    assert record.state is OpState.REJECTED
    assert record.error_reason == "DISPATCH_REJECTED"
    assert record.execution is Execution.NOT_STARTED


@pytest.mark.rule("R5", "C14")
def test_cancelled_before_dispatch_settles_cancelled_not_started() -> None:
    """R5/C14: a tombstone refused the Dispatch: CANCELLED, NOT_STARTED."""
    record, _ = step(
        dispatching(), DispatchRefused(1, "CANCELLED_BEFORE_DISPATCH", INC_A), ctx(PENDING_1)
    )
    assert record.state is OpState.CANCELLED
    assert record.execution is Execution.NOT_STARTED


@pytest.mark.rule("C7")
@pytest.mark.parametrize("reason", ["STORE_UNAVAILABLE", "EXECUTOR_UNAVAILABLE", "SOMETHING"])
def test_other_typed_errors_are_unknown(reason: str) -> None:
    """C7: only the definite reasons are refusals; anything else leaves the attempt unknown."""
    record, _ = step(dispatching(), DispatchRefused(1, reason, INC_A), ctx(PENDING_1))
    assert record.state is OpState.DISPATCH_UNKNOWN


@pytest.mark.rule("C7")
def test_transport_failure_is_unknown() -> None:
    """C7: a deadline or UNAVAILABLE is never proof that nothing ran."""
    record, decision = step(dispatching(), DispatchUnknown(1, "DEADLINE_EXCEEDED"), ctx(PENDING_1))
    assert record.state is OpState.DISPATCH_UNKNOWN
    assert record.execution is Execution.UNKNOWN
    assert record.unknown_since == NOW
    assert decision.change is not None
    assert decision.change.attempt_updates[0].outcome is AttemptOutcome.UNKNOWN
    assert decision.again and "ambiguous" in decision.tags


@pytest.mark.rule("C8a")
def test_reply_for_an_older_attempt_is_discarded() -> None:
    """C8a: a reply counts only on the call that asked for it."""
    decision = decide(
        dispatching(2),
        DispatchAccepted(1, INC_A, row(R.RUNNING)),
        ctx(attempt(1), attempt(2, AttemptOutcome.PENDING)),
    )
    assert decision.change is None and decision.commands == ()


@pytest.mark.rule("C8a", "C12")
def test_reply_after_the_operation_left_dispatching_is_discarded() -> None:
    """C8a/C12: after a restart turned it DISPATCH_UNKNOWN, the old call's reply is dropped."""
    decision = decide(bound(OpState.DISPATCH_UNKNOWN), DispatchUnknown(1, "late"), ctx(attempt(1)))
    assert decision.change is None
