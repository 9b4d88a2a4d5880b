"""The preflight and ambiguity rules of the pure core (C2, C3, C4, C8, C8a)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.decide import decide
from coordinator_svc.core.events import DispatchAccepted, PreflightFailed, RunnerIdentity, Tick
from coordinator_svc.core.model import AttemptOutcome, Execution, OpState
from coordinator_svc.core.runner_view import RunnerOpState as R
from tests.coordinator.core.giving_up import without_tombstone
from tests.coordinator.core.scenario import (
    INC_A,
    INC_B,
    NOW,
    RUNNER,
    STAMP,
    STORE,
    answer,
    attempt,
    bound,
    ctx,
    queued,
    row,
    step,
)


@pytest.mark.rule("C2")
def test_queued_tick_asks_the_routed_runner_first() -> None:
    """C2: a QUEUED operation is preflighted on the chosen runner before any Dispatch."""
    decision = decide(queued(), Tick(route=RUNNER), ctx())
    assert decision.change is None
    assert decision.commands == (cmd.Preflight(RUNNER),)


@pytest.mark.rule("C2a", "C4")
def test_never_sent_first_attempt_to_a_known_runner_goes_without_a_preflight() -> None:
    """C2a: attempt_count 0 and a live watch's identity: written ahead (C4) bound to
    that incarnation and store, and sent, with no status call."""
    known = RunnerIdentity(INC_B, "store-known")
    record, decision = step(queued(), Tick(route=RUNNER, route_identity=known), ctx())
    assert record.state is OpState.DISPATCHING and record.attempt_count == 1
    assert (record.runner, record.incarnation_id, record.store_id) == (
        RUNNER,
        INC_B,
        "store-known",
    )
    assert [type(c) for c in decision.commands] == [cmd.Dispatch]
    dispatch = decision.commands[0]
    assert isinstance(dispatch, cmd.Dispatch) and dispatch.incarnation_id == INC_B


@pytest.mark.rule("C2a")
def test_a_turn_sent_before_asks_first_even_when_the_runner_is_known() -> None:
    """C2a covers only a first attempt never sent: after any attempt (here one a full
    runner refused, so the turn is QUEUED again) a copy may still arrive: preflight."""
    known = RunnerIdentity(INC_A, STORE)
    refused = attempt(1, AttemptOutcome.REFUSED)
    before = queued(attempt_count=1)
    decision = decide(before, Tick(route=RUNNER, route_identity=known), ctx(refused))
    assert decision.change is None
    assert decision.commands == (cmd.Preflight(RUNNER),)


@pytest.mark.rule("C6")
def test_queued_without_a_route_waits_for_the_schedulers_grant() -> None:
    """C6, issue 9: no route yet: nothing is written and nothing polls; the scheduler
    holds the turn and grants it a slot (a Tick with a route) when one frees."""
    decision = decide(queued(), Tick(route=None, waiting="waiting for a free slot"), ctx())
    assert decision.change is None
    assert decision.commands == ()
    assert decision.note == "waiting for a free slot"


@pytest.mark.rule("C4", "C5")
def test_absent_preflight_writes_the_attempt_ahead_then_dispatches() -> None:
    """C4/C5: attempt n+1 is recorded (DISPATCHING, runner, incarnation, store) before the send."""
    record, decision = step(queued(), answer(None, asked=0), ctx())
    assert record.state is OpState.DISPATCHING
    assert record.attempt_count == 1
    assert record.last_attempt_at == NOW
    assert (record.runner, record.incarnation_id, record.store_id) == (RUNNER, INC_A, STORE)
    assert decision.change is not None and decision.change.new_attempt is not None
    new_attempt = decision.change.new_attempt
    assert (new_attempt.number, new_attempt.outcome) == (1, AttemptOutcome.PENDING)
    assert decision.commands == (cmd.Dispatch(RUNNER, 1, INC_A, record.fencing_token, STAMP),)
    assert record.lease_owner == "replica-1"


@pytest.mark.rule("C3")
@pytest.mark.parametrize(
    ("runner_state", "execution", "expected"),
    [
        (R.RUNNING, Execution.STARTED, OpState.RUNNING),
        (R.ACCEPTED, None, OpState.RUNNING),
        (R.SUCCEEDED, Execution.STARTED, OpState.SUCCEEDED),
        (R.FAILED, Execution.STARTED, OpState.FAILED),
    ],
)
def test_present_on_preflight_is_adopted_without_dispatch(
    runner_state: R, execution: Execution | None, expected: OpState
) -> None:
    """C3: present on the answering incarnation: adopt its state, send no Dispatch."""
    record, decision = step(queued(), answer(row(runner_state, execution), asked=0), ctx())
    assert record.state is expected
    assert not any(isinstance(c, cmd.Dispatch) for c in decision.commands)
    assert record.runner == RUNNER and record.incarnation_id == INC_A
    assert record.acknowledged


@pytest.mark.rule("C8")
def test_unknown_present_same_incarnation_is_adopted_and_counted_reconciled() -> None:
    """C8: DISPATCH_UNKNOWN, same incarnation present: adopt (no resend)."""
    before = bound(OpState.DISPATCH_UNKNOWN)
    record, decision = step(before, answer(row(R.RUNNING, Execution.STARTED)), ctx(attempt(1)))
    assert record.state is OpState.RUNNING
    assert record.execution is Execution.STARTED
    assert "reconciled" in decision.tags
    assert decision.change is not None
    assert decision.change.attempt_updates[0].outcome is AttemptOutcome.ACCEPTED


@pytest.mark.rule("C8", "C10")
def test_unknown_present_and_finished_goes_terminal_and_releases() -> None:
    """C8/C10: a finished row is adopted directly; the runner is told to release it."""
    before = bound(OpState.DISPATCH_UNKNOWN)
    done = row(R.SUCCEEDED, Execution.STARTED, result=b"out")
    record, decision = step(before, answer(done), ctx(attempt(1)))
    assert record.state is OpState.SUCCEEDED and record.result == b"out"
    assert decision.commands == (cmd.Release(RUNNER, INC_A, record.fencing_token),)
    assert record.released


@pytest.mark.rule("C8")
def test_unknown_absent_same_incarnation_replays_exactly_to_it() -> None:
    """C8: same incarnation absent: replay, next attempt number, same runner and incarnation."""
    before = bound(OpState.DISPATCH_UNKNOWN)
    record, decision = step(before, answer(None), ctx(attempt(1)))
    assert record.state is OpState.DISPATCHING
    assert record.attempt_count == 2
    assert decision.commands == (cmd.Dispatch(RUNNER, 2, INC_A, record.fencing_token, STAMP),)
    assert "replay" in decision.tags
    assert record.unknown_since == before.unknown_since  # the ambiguity continues


@pytest.mark.rule("C8")
def test_unknown_changed_incarnation_times_out_without_any_dispatch() -> None:
    """C8: a different incarnation: TIMED_OUT INCARNATION_CHANGED, execution UNKNOWN, no send."""
    before = bound(OpState.DISPATCH_UNKNOWN)
    record, decision = step(before, answer(None, incarnation=INC_B), ctx(attempt(1)))
    assert record.state is OpState.TIMED_OUT
    assert record.error_reason == "INCARNATION_CHANGED"
    assert record.execution is Execution.UNKNOWN
    assert decision.commands == ()


@pytest.mark.rule("C8")
def test_unreachable_runner_backs_off_before_the_deadline() -> None:
    """C8: unreachable: stay DISPATCH_UNKNOWN and retry with backoff."""
    before = bound(OpState.DISPATCH_UNKNOWN)
    decision = decide(before, PreflightFailed(RUNNER, "UNAVAILABLE", 1, 3), ctx(attempt(1)))
    assert decision.change is None
    (schedule,) = decision.commands
    assert isinstance(schedule, cmd.ScheduleAt) and schedule.at > NOW


@pytest.mark.rule("C8")
def test_unreachable_runner_past_the_reconcile_deadline_times_out() -> None:
    """C8: the reconcile deadline ends the ambiguity: TIMED_OUT RECONCILE_DEADLINE, UNKNOWN."""
    before = bound(OpState.DISPATCH_UNKNOWN, unknown_since=NOW - timedelta(seconds=31))
    context = ctx(attempt(1))
    gave_up = decide(before, PreflightFailed(RUNNER, "UNAVAILABLE", 1), context)
    record, _ = without_tombstone(before, gave_up, context)
    assert record.state is OpState.TIMED_OUT
    assert record.error_reason == "RECONCILE_DEADLINE"
    assert record.execution is Execution.UNKNOWN


@pytest.mark.rule("C8", "C14")
def test_tick_past_the_reconcile_deadline_times_out() -> None:
    """C8: a due DISPATCH_UNKNOWN past its deadline ends without another status call
    (one Cancel asks for a tombstone first, C14; unanswered here)."""
    before = bound(OpState.DISPATCH_UNKNOWN, unknown_since=NOW - timedelta(seconds=31))
    context = ctx(attempt(1))
    record, decision = without_tombstone(before, decide(before, Tick(), context), context)
    assert record.error_reason == "RECONCILE_DEADLINE"
    assert decision.commands == ()


@pytest.mark.rule("C8")
def test_tick_on_unknown_preflights_the_bound_runner() -> None:
    """C8: DISPATCH_UNKNOWN is resolved by a status call on the bound runner only."""
    decision = decide(bound(OpState.DISPATCH_UNKNOWN), Tick(route="other"), ctx(attempt(1)))
    assert decision.commands == (cmd.Preflight(RUNNER),)


@pytest.mark.rule("C8a")
def test_answer_from_another_runner_is_ignored() -> None:
    """C8a: an answer speaks only for the runner bound to the operation."""
    before = bound(OpState.DISPATCH_UNKNOWN)
    decision = decide(before, answer(None, runner="r2"), ctx(attempt(1)))
    assert decision.change is None and decision.commands == ()


@pytest.mark.rule("C8a")
def test_answer_to_a_superseded_call_is_discarded() -> None:
    """C8a: a status answer asked before a later attempt counts for nothing."""
    before = bound(OpState.DISPATCH_UNKNOWN, attempts=2)
    decision = decide(before, answer(None, asked=1), ctx(attempt(1), attempt(2)))
    assert decision.change is None and decision.commands == ()


@pytest.mark.rule("C8a")
def test_dispatch_reply_from_another_incarnation_is_not_adopted() -> None:
    """C8a: a Dispatch reply naming another incarnation is ambiguity, never adoption."""
    before = bound(OpState.DISPATCHING, execution=Execution.UNKNOWN)
    reply = DispatchAccepted(1, INC_B, row(R.SUCCEEDED, Execution.STARTED, INC_B))
    record, _ = step(before, reply, ctx(attempt(1, AttemptOutcome.PENDING)))
    assert record.state is OpState.DISPATCH_UNKNOWN
    assert record.result is None


@pytest.mark.rule("C4")
def test_preflight_while_dispatching_changes_nothing() -> None:
    """C4: while a Dispatch is in flight only its reply decides."""
    before = bound(OpState.DISPATCHING)
    decision = decide(before, answer(None), ctx(attempt(1, AttemptOutcome.PENDING)))
    assert decision.change is None and decision.commands == ()
