"""Issue 8 item 5 in the pure core: the confirmed start is recorded (R3, C14),
giving up proves NOT_STARTED by a tombstone where it can (C14, R5), and the
reported stop reason is the one that stopped the turn (R6, C11)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.decide import decide
from coordinator_svc.core.events import (
    CancelAnswered,
    CancelFailed,
    DispatchRefused,
    PreflightFailed,
    RunnerReported,
    Tick,
)
from coordinator_svc.core.model import (
    AttemptOutcome,
    Execution,
    OpState,
    ReplayPolicy,
    StopReason,
)
from coordinator_svc.core.runner_view import RunnerOpState as R
from tests.coordinator.core.scenario import (
    INC_A,
    INC_B,
    NOW,
    RUNNER,
    answer,
    attempt,
    bound,
    ctx,
    row,
    step,
)

ACCEPTED_1 = attempt(1, AttemptOutcome.ACCEPTED)
STARTED_ROW = row(R.RUNNING, Execution.STARTED)


# --- b. the runner's confirmed start is recorded ----------------------------------


@pytest.mark.rule("R3", "C14")
def test_watch_report_of_the_confirmed_start_is_recorded_while_running() -> None:
    """R3/C14: RUNNING keeps no UNKNOWN the runner has resolved: STARTED, no event."""
    before = bound(OpState.RUNNING)
    record, decision = step(before, RunnerReported(RUNNER, INC_A, STARTED_ROW), ctx(ACCEPTED_1))
    assert record.state is OpState.RUNNING and record.execution is Execution.STARTED
    assert decision.change is not None and decision.change.event is None
    # Told again: nothing more to write.
    again = decide(record, RunnerReported(RUNNER, INC_A, STARTED_ROW), ctx(ACCEPTED_1))
    assert again.change is None


@pytest.mark.rule("R3")
def test_confirmed_start_is_recorded_while_cancelling() -> None:
    """R3: a CANCELLING operation records the start the watch reports."""
    before = bound(OpState.CANCELLING, cancel_requested=True, stop_reason=StopReason.CANCEL)
    record, _ = step(before, RunnerReported(RUNNER, INC_A, STARTED_ROW), ctx(ACCEPTED_1))
    assert record.state is OpState.CANCELLING and record.execution is Execution.STARTED


@pytest.mark.rule("R3")
def test_status_poll_folds_the_confirmed_start_into_its_own_write() -> None:
    """R3: the fallback poll already writes its schedule; STARTED rides on that write."""
    before = bound(OpState.RUNNING)
    record, decision = step(before, answer(STARTED_ROW), ctx(ACCEPTED_1))
    assert record.execution is Execution.STARTED
    assert record.next_action_at is not None and record.next_action_at > NOW
    assert decision.change is not None and decision.change.event is None


@pytest.mark.rule("C9", "C14")
def test_recorded_start_survives_a_later_incarnation_change() -> None:
    """C9/C14: STARTED was known, so the changed incarnation ends STARTED, not UNKNOWN."""
    running, _ = step(
        bound(OpState.RUNNING), RunnerReported(RUNNER, INC_A, STARTED_ROW), ctx(ACCEPTED_1)
    )
    record, _ = step(running, answer(None, incarnation=INC_B), ctx(ACCEPTED_1))
    assert record.state is OpState.TIMED_OUT and record.error_reason == "INCARNATION_CHANGED"
    assert record.execution is Execution.STARTED


# --- c. giving up proves NOT_STARTED by a tombstone where it can -----------------


@pytest.mark.rule("C14", "R5")
def test_max_attempts_on_a_reachable_incarnation_tombstones_before_giving_up() -> None:
    """C14/R5: absent on the bound incarnation, no attempt left: Cancel first, no write."""
    before = bound(OpState.DISPATCH_UNKNOWN, 2, max_attempts=2)
    rows = (attempt(1), attempt(2))
    decision = decide(before, answer(None, asked=2), ctx(*rows))
    assert decision.change is None
    (cancel,) = decision.commands
    assert isinstance(cancel, cmd.Cancel)
    assert (cancel.runner, cancel.incarnation_id) == (RUNNER, INC_A)
    assert cancel.give_up is not None and cancel.give_up.reason == "MAX_ATTEMPTS_EXCEEDED"
    tombstone = CancelAnswered(RUNNER, INC_A, None, tombstoned=True, give_up=cancel.give_up)
    record, _ = step(before, tombstone, ctx(*rows))
    assert record.state is OpState.TIMED_OUT
    assert record.error_reason == "MAX_ATTEMPTS_EXCEEDED"
    assert record.execution is Execution.NOT_STARTED


@pytest.mark.rule("C8b", "R5")
def test_the_give_up_tombstone_seen_first_decides_as_the_reply_would() -> None:
    """C8b, R5 (regression, issue 9): the give-up Cancel's tombstone reached the watch
    stream before the Cancel's reply did, and was adopted as CANCELLED, which nobody
    asked for (the reply then raised a TERMINAL_CONFLICT alarm). A tombstone with no
    cancel requested is the give-up's own: seen on the watch or in a status answer it
    ends the operation as the reply would (TIMED_OUT, the give-up's reason,
    NOT_STARTED); the reply and later reports of it then change nothing, no alarm."""
    before = bound(OpState.DISPATCH_UNKNOWN, 2, max_attempts=2)
    rows = (attempt(1), attempt(2))
    (cancel,) = decide(before, answer(None, asked=2), ctx(*rows)).commands
    assert isinstance(cancel, cmd.Cancel) and cancel.give_up is not None
    tombstone_row = row(R.TOMBSTONED, Execution.NOT_STARTED)
    for early in (RunnerReported(RUNNER, INC_A, tombstone_row), answer(tombstone_row, asked=2)):
        record, _ = step(before, early, ctx(*rows))
        assert (record.state, record.error_reason) == (OpState.TIMED_OUT, "MAX_ATTEMPTS_EXCEEDED")
        assert record.execution is Execution.NOT_STARTED and record.stop_reason is None
        reply = CancelAnswered(RUNNER, INC_A, tombstone_row, True, give_up=cancel.give_up)
        for later in (reply, RunnerReported(RUNNER, INC_A, tombstone_row)):
            after = decide(record, later, ctx(*rows))
            assert after.change is None and "alarm" not in after.tags, after


@pytest.mark.rule("C8b")
def test_a_give_up_tombstone_past_the_reconcile_deadline_says_so() -> None:
    """C8b: attempts left, so the give-up was the reconcile deadline's."""
    before = bound(OpState.DISPATCH_UNKNOWN, 1, max_attempts=5)
    report = RunnerReported(RUNNER, INC_A, row(R.TOMBSTONED, Execution.NOT_STARTED))
    record, _ = step(before, report, ctx(attempt(1)))
    assert (record.state, record.error_reason) == (OpState.TIMED_OUT, "RECONCILE_DEADLINE")
    assert record.execution is Execution.NOT_STARTED


@pytest.mark.rule("C14")
def test_give_up_cancel_without_an_answer_ends_unknown_as_before() -> None:
    """C14: no tombstone, no proof: TIMED_OUT with execution UNKNOWN."""
    before = bound(OpState.DISPATCH_UNKNOWN, 2, max_attempts=2)
    rows = (attempt(1), attempt(2))
    (cancel,) = decide(before, answer(None, asked=2), ctx(*rows)).commands
    assert isinstance(cancel, cmd.Cancel)
    failed = CancelFailed(RUNNER, "", detail="UNAVAILABLE", give_up=cancel.give_up)
    record, _ = step(before, failed, ctx(*rows))
    assert record.state is OpState.TIMED_OUT and record.error_reason == "MAX_ATTEMPTS_EXCEEDED"
    assert record.execution is Execution.UNKNOWN


@pytest.mark.rule("C8")
def test_give_up_cancel_that_finds_a_settled_row_adopts_it() -> None:
    """C8: the Cancel's reply names the bound incarnation: its settled row is the truth."""
    before = bound(OpState.DISPATCH_UNKNOWN, 2, max_attempts=2)
    rows = (attempt(1), attempt(2))
    (cancel,) = decide(before, answer(None, asked=2), ctx(*rows)).commands
    assert isinstance(cancel, cmd.Cancel)
    done = row(R.SUCCEEDED, Execution.STARTED, result=b"x")
    reply = CancelAnswered(RUNNER, INC_A, done, tombstoned=False, give_up=cancel.give_up)
    record, _ = step(before, reply, ctx(*rows))
    assert record.state is OpState.SUCCEEDED and record.execution is Execution.STARTED


@pytest.mark.rule("C8", "C11")
def test_give_up_cancel_that_finds_a_live_row_follows_its_stop() -> None:
    """C8/C11: a delayed Dispatch got there first: it is being stopped; acknowledged."""
    before = bound(OpState.DISPATCH_UNKNOWN, 2, max_attempts=2)
    rows = (attempt(1), attempt(2))
    (cancel,) = decide(before, answer(None, asked=2), ctx(*rows)).commands
    assert isinstance(cancel, cmd.Cancel)
    reply = CancelAnswered(RUNNER, INC_A, STARTED_ROW, tombstoned=False, give_up=cancel.give_up)
    record, _ = step(before, reply, ctx(*rows))
    assert record.state is OpState.CANCELLING and record.acknowledged
    assert record.execution is Execution.STARTED and record.unknown_since is None
    assert not record.cancel_requested


@pytest.mark.rule("C8", "C14")
def test_reconcile_deadline_tombstones_before_giving_up() -> None:
    """C8/C14: at the deadline, one Cancel to the bound incarnation; a tombstone proves it."""
    before = bound(OpState.DISPATCH_UNKNOWN, unknown_since=NOW - timedelta(seconds=60))
    decision = decide(before, Tick(), ctx(attempt(1)))
    assert decision.change is None
    (cancel,) = decision.commands
    assert isinstance(cancel, cmd.Cancel) and cancel.give_up is not None
    assert cancel.give_up.reason == "RECONCILE_DEADLINE"
    tombstone = CancelAnswered(RUNNER, INC_A, None, tombstoned=True, give_up=cancel.give_up)
    record, _ = step(before, tombstone, ctx(attempt(1)))
    assert record.state is OpState.TIMED_OUT and record.error_reason == "RECONCILE_DEADLINE"
    assert record.execution is Execution.NOT_STARTED


@pytest.mark.rule("C8")
def test_unreachable_past_the_deadline_tries_the_tombstone_once() -> None:
    """C8: a failed preflight past the deadline: one Cancel; its failure ends UNKNOWN."""
    before = bound(OpState.DISPATCH_UNKNOWN, unknown_since=NOW - timedelta(seconds=60))
    decision = decide(before, PreflightFailed(RUNNER, "UNAVAILABLE", 1), ctx(attempt(1)))
    (cancel,) = decision.commands
    assert isinstance(cancel, cmd.Cancel) and cancel.give_up is not None
    refused = CancelFailed(RUNNER, "INCARNATION_MISMATCH", INC_B, give_up=cancel.give_up)
    record, _ = step(before, refused, ctx(attempt(1)))
    assert record.state is OpState.TIMED_OUT and record.execution is Execution.UNKNOWN


@pytest.mark.rule("C14")
def test_never_automatic_absent_on_the_bound_incarnation_tombstones() -> None:
    """§3 NEVER_AUTOMATIC/C14: no replay, but absence + tombstone proves NOT_STARTED."""
    before = bound(OpState.DISPATCH_UNKNOWN, replay_policy=ReplayPolicy.NEVER_AUTOMATIC)
    (cancel,) = decide(before, answer(None), ctx(attempt(1))).commands
    assert isinstance(cancel, cmd.Cancel) and cancel.give_up is not None
    tombstone = CancelAnswered(RUNNER, INC_A, None, tombstoned=True, give_up=cancel.give_up)
    record, _ = step(before, tombstone, ctx(attempt(1)))
    assert record.state is OpState.TIMED_OUT and record.execution is Execution.NOT_STARTED


@pytest.mark.rule("C14")
def test_attempt_on_another_incarnation_cannot_be_proven_so_no_cancel() -> None:
    """C14: a tombstone on I speaks only for I; an attempt to a dead one stays UNKNOWN."""
    before = bound(OpState.DISPATCH_UNKNOWN, 2, max_attempts=2)
    rows = (attempt(1, incarnation=INC_B, store=None), attempt(2))
    record, decision = step(before, answer(None, asked=2), ctx(*rows))
    assert record.state is OpState.TIMED_OUT and record.execution is Execution.UNKNOWN
    assert decision.commands == ()


@pytest.mark.rule("C8a")
def test_give_up_cancel_reply_after_the_operation_moved_on_changes_nothing() -> None:
    """C8a: the give-up reply counts only while the operation still waits for it."""
    moved = bound(OpState.RUNNING)
    give_up = cmd.GiveUp("RECONCILE_DEADLINE", "no answer")
    reply = CancelAnswered(RUNNER, INC_A, None, tombstoned=True, give_up=give_up)
    assert decide(moved, reply, ctx(ACCEPTED_1)).change is None


# --- d. the stop reason says what stopped the turn -------------------------------


@pytest.mark.rule("C11", "R6")
def test_cancel_that_lost_the_race_records_no_stop_reason() -> None:
    """C11/R6: SUCCEEDED after a cancel: cancel_requested shows it, no stop reason."""
    before = bound(OpState.CANCELLING, cancel_requested=True, stop_reason=StopReason.CANCEL)
    done = row(R.SUCCEEDED, Execution.STARTED, result=b"x")
    record, _ = step(before, CancelAnswered(RUNNER, INC_A, done, False), ctx(ACCEPTED_1))
    assert record.state is OpState.SUCCEEDED and record.cancel_requested
    assert record.stop_reason is None


@pytest.mark.rule("R6", "R8")
def test_turn_that_finished_during_a_drain_shows_no_shutdown() -> None:
    """R6/R8: the drain asked it to stop, it finished on its own: no stop reason."""
    done = row(R.SUCCEEDED, Execution.STARTED, result=b"x", stop_reason=StopReason.SHUTDOWN)
    record, _ = step(bound(OpState.RUNNING), RunnerReported(RUNNER, INC_A, done), ctx(ACCEPTED_1))
    assert record.state is OpState.SUCCEEDED and record.stop_reason is None


@pytest.mark.rule("R6")
def test_stop_reason_that_stopped_the_turn_is_kept() -> None:
    """R6: the runner's first stop reason decided the outcome: it is the reported one."""
    stopped = row(R.CANCELLED, Execution.STARTED, stop_reason=StopReason.SHUTDOWN)
    record, _ = step(
        bound(OpState.RUNNING), RunnerReported(RUNNER, INC_A, stopped), ctx(ACCEPTED_1)
    )
    assert record.state is OpState.CANCELLED and record.stop_reason is StopReason.SHUTDOWN
    before = bound(OpState.CANCELLING, cancel_requested=True, stop_reason=StopReason.CANCEL)
    record, _ = step(before, CancelAnswered(RUNNER, INC_A, None, True), ctx(ACCEPTED_1))
    assert record.state is OpState.CANCELLED and record.stop_reason is StopReason.CANCEL


@pytest.mark.rule("R6")
def test_failure_on_its_own_after_a_lost_cancel_records_no_stop_reason() -> None:
    """R6: the runner never got the cancel and the turn failed by itself."""
    before = bound(OpState.CANCELLING, cancel_requested=True, stop_reason=StopReason.CANCEL)
    failed = row(R.FAILED, Execution.STARTED, error_reason="EXECUTOR_FAILED")
    record, _ = step(before, RunnerReported(RUNNER, INC_A, failed), ctx(ACCEPTED_1))
    assert record.state is OpState.FAILED and record.stop_reason is None


@pytest.mark.rule("C6", "C14")
def test_dispatch_too_large_for_the_runner_is_rejected_not_started() -> None:
    """C6/C14: a Dispatch over the runner's receive limit never reached it: refused for
    good (REJECTED, DISPATCH_REJECTED), NOT_STARTED, never replayed."""
    before = bound(OpState.DISPATCHING, acknowledged=False)
    rows = (attempt(1, AttemptOutcome.PENDING),)
    refusal = DispatchRefused(1, "MESSAGE_TOO_LARGE", "", "4194464 > 4194304")
    record, decision = step(before, refusal, ctx(*rows))
    assert record.state is OpState.REJECTED and record.error_reason == "DISPATCH_REJECTED"
    assert record.execution is Execution.NOT_STARTED
    assert decision.commands == ()
