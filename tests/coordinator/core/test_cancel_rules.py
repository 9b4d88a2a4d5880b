"""Cancel in the pure core (C11, with C14 for what a cancel proves)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.decide import decide
from coordinator_svc.core.events import (
    CancelAnswered,
    CancelFailed,
    CancelRequested,
    DispatchAccepted,
    DispatchRefused,
    DispatchUnknown,
    Tick,
)
from coordinator_svc.core.model import AttemptOutcome, Execution, OpState, StopReason
from coordinator_svc.core.runner_view import RunnerOpState as R
from tests.coordinator.core.giving_up import without_tombstone
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
    queued,
    row,
    step,
)


@pytest.mark.rule("C11", "C14")
def test_cancel_while_queued_is_cancelled_not_started_at_once() -> None:
    """C11/C14: QUEUED with no attempt -> CANCELLED, NOT_STARTED, stop reason CANCEL."""
    record, decision = step(queued(), CancelRequested(), ctx())
    assert record.state is OpState.CANCELLED
    assert record.execution is Execution.NOT_STARTED
    assert record.cancel_requested and record.stop_reason is StopReason.CANCEL
    assert decision.commands == ()


@pytest.mark.rule("C11", "C14")
def test_cancel_while_queued_after_refusals_is_not_started() -> None:
    """C11/C14: every earlier attempt was refused: still NOT_STARTED."""
    before = queued(attempt_count=1, last_event_sequence=3)
    record, _ = step(before, CancelRequested(), ctx(attempt(1, AttemptOutcome.REFUSED)))
    assert record.execution is Execution.NOT_STARTED


@pytest.mark.rule("C11")
def test_cancel_while_dispatching_is_stored_then_acted_on_after_acknowledgement() -> None:
    """C11: stored while DISPATCHING (no state change); RUNNING then CANCELLING + Cancel."""
    rows = (attempt(1, AttemptOutcome.PENDING),)
    stored, decision = step(bound(OpState.DISPATCHING), CancelRequested(), ctx(*rows))
    assert stored.state is OpState.DISPATCHING and stored.cancel_requested
    assert decision.change is not None and decision.change.event is None
    assert decision.commands == ()
    running, decision = step(stored, DispatchAccepted(1, INC_A, row(R.RUNNING)), ctx(*rows))
    assert running.state is OpState.RUNNING and decision.again
    rows = attempts_after(rows, decision)
    cancelling, decision = step(running, Tick(), ctx(*rows))
    assert cancelling.state is OpState.CANCELLING
    assert decision.commands == (cmd.Cancel(RUNNER, INC_A, running.fencing_token),)


@pytest.mark.rule("C11", "C14")
def test_cancel_while_dispatching_then_refused_is_cancelled_not_started() -> None:
    """C11/C14: the stored cancel meets an all-refused history: CANCELLED, NOT_STARTED."""
    rows = (attempt(1, AttemptOutcome.PENDING),)
    stored, _ = step(bound(OpState.DISPATCHING), CancelRequested(), ctx(*rows))
    final, _ = step(stored, DispatchRefused(1, "NO_FREE_SLOT", INC_A), ctx(*rows))
    assert final.state is OpState.CANCELLED and final.execution is Execution.NOT_STARTED


@pytest.mark.rule("C11")
def test_cancel_while_dispatching_then_unknown_cancels_the_bound_incarnation() -> None:
    """C11: the stored cancel after an unknown Dispatch: CANCELLING, Cancel bound to I."""
    rows = (attempt(1, AttemptOutcome.PENDING),)
    stored, _ = step(bound(OpState.DISPATCHING), CancelRequested(), ctx(*rows))
    unknown, decision = step(stored, DispatchUnknown(1, "DEADLINE_EXCEEDED"), ctx(*rows))
    rows = attempts_after(rows, decision)
    cancelling, decision = step(unknown, Tick(), ctx(*rows))
    assert cancelling.state is OpState.CANCELLING
    assert decision.commands == (cmd.Cancel(RUNNER, INC_A, unknown.fencing_token),)


@pytest.mark.rule("C11")
def test_cancel_after_dispatch_sends_cancel_to_the_bound_incarnation() -> None:
    """C11: RUNNING -> CANCELLING, Cancel carries the bound incarnation."""
    record, decision = step(bound(OpState.RUNNING), CancelRequested(), ctx(attempt(1)))
    assert record.state is OpState.CANCELLING
    assert decision.commands == (cmd.Cancel(RUNNER, INC_A, record.fencing_token),)


@pytest.mark.rule("C11")
def test_second_cancel_changes_nothing() -> None:
    """C11: the first stop reason wins and is stored once."""
    before = bound(OpState.CANCELLING, cancel_requested=True, stop_reason=StopReason.CANCEL)
    decision = decide(before, CancelRequested(), ctx(attempt(1)))
    assert decision.change is None and decision.commands == ()


@pytest.mark.rule("C10", "C11")
def test_cancel_of_a_terminal_operation_changes_nothing() -> None:
    """C10/C11: a finished operation stays as it is."""
    before = bound(OpState.SUCCEEDED, execution=Execution.STARTED, released=True)
    assert decide(before, CancelRequested(), ctx(attempt(1))).change is None


@pytest.mark.rule("C11", "C14")
def test_tombstone_reply_settles_cancelled_not_started() -> None:
    """C11/C14: the runner tombstoned the id on the bound incarnation: NOT_STARTED."""
    before = bound(OpState.CANCELLING, acknowledged=False, cancel_requested=True)
    record, _ = step(before, CancelAnswered(RUNNER, INC_A, None, tombstoned=True), ctx(attempt(1)))
    assert record.state is OpState.CANCELLED and record.execution is Execution.NOT_STARTED


@pytest.mark.rule("C11")
def test_cancel_that_lost_the_race_keeps_succeeded_and_shows_the_request() -> None:
    """C11: a turn that finished first stays SUCCEEDED; cancel_requested stays visible."""
    before = bound(OpState.CANCELLING, cancel_requested=True, stop_reason=StopReason.CANCEL)
    done = row(R.SUCCEEDED, Execution.STARTED, result=b"x")
    record, _ = step(before, CancelAnswered(RUNNER, INC_A, done, False), ctx(attempt(1)))
    assert record.state is OpState.SUCCEEDED and record.cancel_requested


@pytest.mark.rule("C11")
def test_cancel_reply_still_running_waits() -> None:
    """C11: the runner's settlement decides; a still-running row changes nothing."""
    before = bound(OpState.CANCELLING, cancel_requested=True)
    decision = decide(before, CancelAnswered(RUNNER, INC_A, row(R.RUNNING), False), ctx(attempt(1)))
    assert decision.change is None


@pytest.mark.rule("C8a", "C11")
def test_cancel_reply_from_another_incarnation_is_checked_by_status() -> None:
    """C8a/C11: a Cancel reply counts only for the incarnation it names."""
    before = bound(OpState.CANCELLING, cancel_requested=True, acknowledged=False)
    decision = decide(before, CancelAnswered(RUNNER, INC_B, None, True), ctx(attempt(1)))
    assert decision.change is None
    assert decision.commands == (cmd.Preflight(RUNNER),)


@pytest.mark.rule("C11")
def test_unacknowledged_absent_while_cancelling_is_cancelled_again() -> None:
    """C11: never acknowledged and absent on the same incarnation: Cancel again (tombstone)."""
    before = bound(OpState.CANCELLING, cancel_requested=True, acknowledged=False)
    decision = decide(before, answer(None), ctx(attempt(1)))
    assert decision.change is None
    assert decision.commands == (cmd.Cancel(RUNNER, INC_A, before.fencing_token),)


@pytest.mark.rule("C11", "C9")
def test_acknowledged_absent_while_cancelling_is_a_protocol_error() -> None:
    """C11/C9: only an acknowledged operation that vanishes is a PROTOCOL_ERROR."""
    before = bound(OpState.CANCELLING, cancel_requested=True, acknowledged=True)
    record, _ = step(before, answer(None), ctx(attempt(1, AttemptOutcome.ACCEPTED)))
    assert record.state is OpState.PROTOCOL_ERROR
    assert record.error_reason == "ACKNOWLEDGED_OPERATION_DISAPPEARED"


@pytest.mark.rule("C9", "C11")
def test_cancel_refused_for_incarnation_mismatch_checks_status() -> None:
    """C9/C11: the runner restarted under a Cancel: find out by status."""
    before = bound(OpState.CANCELLING, cancel_requested=True)
    decision = decide(before, CancelFailed(RUNNER, "INCARNATION_MISMATCH", INC_B), ctx(attempt(1)))
    assert decision.commands == (cmd.Preflight(RUNNER),)


@pytest.mark.rule("C7", "C11")
def test_cancel_without_answer_backs_off() -> None:
    """C7/C11: an unanswered Cancel is retried later (the status poll re-sends it)."""
    before = bound(OpState.CANCELLING, cancel_requested=True)
    decision = decide(before, CancelFailed(RUNNER, "", detail="UNAVAILABLE"), ctx(attempt(1)))
    assert decision.change is None and isinstance(decision.commands[0], cmd.ScheduleAt)


@pytest.mark.rule("C8", "C11")
def test_unacknowledged_cancelling_keeps_the_reconcile_deadline() -> None:
    """C8/C11: an unacknowledged CANCELLING still ends at the reconcile deadline (UNKNOWN)."""
    rows = (attempt(1),)
    unknown = bound(OpState.DISPATCH_UNKNOWN)
    cancelling, _ = step(unknown, CancelRequested(), ctx(*rows))
    assert cancelling.unknown_since == unknown.unknown_since
    late = ctx(*rows, now=NOW + timedelta(seconds=60))
    record, _ = without_tombstone(cancelling, decide(cancelling, Tick(), late), late)
    assert record.state is OpState.TIMED_OUT and record.error_reason == "RECONCILE_DEADLINE"
    assert record.execution is Execution.UNKNOWN


@pytest.mark.rule("C9", "C11")
def test_acknowledged_cancelling_has_no_reconcile_deadline() -> None:
    """C9/C11: an acknowledged operation waits for its runner; only its settlement ends it."""
    before = bound(OpState.CANCELLING, cancel_requested=True, acknowledged=True)
    late = ctx(attempt(1, AttemptOutcome.ACCEPTED), now=NOW + timedelta(days=1))
    assert decide(before, Tick(), late).commands == (cmd.Preflight(RUNNER),)
