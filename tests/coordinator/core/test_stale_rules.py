"""C6c (issue 27): a Dispatch refused DISPATCH_STALE is sent again with a fresh stamp,
never counted against max_attempts, a bounded number of times, and what the refusal
shows of the clocks is said."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.decide import decide
from coordinator_svc.core.events import DispatchRefused
from coordinator_svc.core.model import AttemptOutcome, AttemptRecord, Execution, OpState
from coordinator_svc.core.stale import STALE_STREAK_LIMIT, read_stale
from tests.coordinator.core.scenario import INC_A, NOW, answer, attempt, bound, ctx, queued, step
from turnwire.ids import dispatch_stamp

# The builders' attempts were written ahead five seconds before NOW.
SENT = dispatch_stamp(NOW - timedelta(seconds=5))


def stale(number: int) -> AttemptRecord:
    return dataclasses.replace(
        attempt(number, AttemptOutcome.REFUSED), detail="DISPATCH_STALE: below the floor"
    )


def refusal(number: int, floor: int | None = None) -> DispatchRefused:
    return DispatchRefused(number, "DISPATCH_STALE", INC_A, "below the floor", floor)


@pytest.mark.rule("C6c")
def test_stale_refusals_never_count_toward_max_attempts() -> None:
    """C6c: five DISPATCH_STALE refusals with max_attempts=2: sent again, a sixth attempt."""
    rows = tuple(stale(n) for n in range(1, 6))
    before = queued(attempt_count=5, max_attempts=2, last_event_sequence=11)
    record, decision = step(before, answer(None, asked=5), ctx(*rows))
    assert record.state is OpState.DISPATCHING and record.attempt_count == 6
    (dispatch,) = [c for c in decision.commands if isinstance(c, cmd.Dispatch)]
    assert dispatch.dispatch_stamp == dispatch_stamp(NOW)  # a fresh stamp


@pytest.mark.rule("C6c", "C6")
def test_a_stale_first_attempt_goes_back_to_queued_and_is_sent_again_soon() -> None:
    """C6c: refused stale, attempt 1 is closed REFUSED with what it showed; the turn is
    QUEUED, unbound, NOT_STARTED, and tried again after the first backoff."""
    before = bound(OpState.DISPATCHING, 1)
    context = ctx(attempt(1, AttemptOutcome.PENDING))
    record, decision = step(before, refusal(1, SENT + 100_000), context)
    assert record.state is OpState.QUEUED and record.runner is None
    assert record.execution is Execution.NOT_STARTED
    assert record.next_action_at == NOW + timedelta(seconds=context.backoff_initial)
    assert decision.change is not None
    (update,) = decision.change.attempt_updates
    assert update.outcome is AttemptOutcome.REFUSED
    assert update.detail.startswith("DISPATCH_STALE: below the floor; ")
    assert decision.change.event is not None
    assert "sent again (C6c)" in decision.change.event.detail


@pytest.mark.rule("C6c")
def test_a_floor_past_the_stamp_by_more_than_the_call_took_is_named_clock_skew() -> None:
    """C6c: the floor 9 s past a stamp sent 5 s ago: the runner's clock is at least 4 s
    ahead, and the words say clock skew and what to fix; a floor just past the stamp
    after a slow call says the Dispatch came late instead."""
    skewed = read_stale(SENT, SENT + 9_000_000, dispatch_stamp(NOW))
    assert skewed.ahead == pytest.approx(4.0)
    said = skewed.describe("r1")
    assert said.startswith("clock skew: runner r1's clock reads at least 4.000 s ahead")
    assert "NTP" in said
    late = read_stale(SENT, SENT + 100_000, dispatch_stamp(NOW)).describe("r1")
    assert "after its admission window" in late and "clock skew" not in late
    unsaid = read_stale(SENT, None, dispatch_stamp(NOW))
    assert unsaid.ahead is None and "after its admission window" in unsaid.describe("r1")


@pytest.mark.rule("C6c", "C14")
def test_a_run_of_stale_refusals_ends_the_turn_timed_out_not_started() -> None:
    """C6c: after STALE_STREAK_LIMIT stale refusals in a row no attempt is written:
    TIMED_OUT, DISPATCH_STALE, NOT_STARTED (every attempt was refused), quoting the last."""
    rows = tuple(stale(n) for n in range(1, STALE_STREAK_LIMIT + 1))
    count = STALE_STREAK_LIMIT
    before = queued(attempt_count=count, last_event_sequence=2 * count + 1)
    record, decision = step(before, answer(None, asked=count), ctx(*rows))
    assert record.state is OpState.TIMED_OUT and record.error_reason == "DISPATCH_STALE"
    assert record.execution is Execution.NOT_STARTED
    assert f"{count} Dispatches in a row" in (record.error_message or "")
    assert not any(isinstance(c, cmd.Dispatch) for c in decision.commands)


@pytest.mark.rule("C6c")
def test_a_run_shorter_than_the_limit_or_broken_by_another_answer_goes_on() -> None:
    """C6c: one stale refusal fewer, or a run broken by another refusal, is sent again."""
    fewer = tuple(stale(n) for n in range(1, STALE_STREAK_LIMIT))
    before = queued(attempt_count=len(fewer), last_event_sequence=20)
    record, _ = step(before, answer(None, asked=len(fewer)), ctx(*fewer))
    assert record.state is OpState.DISPATCHING
    broken = (*fewer, dataclasses.replace(stale(STALE_STREAK_LIMIT), detail="NO_FREE_SLOT: full"))
    before = queued(attempt_count=len(broken), last_event_sequence=20)
    record, _ = step(before, answer(None, asked=len(broken)), ctx(*broken))
    assert record.state is OpState.DISPATCHING


@pytest.mark.rule("C6c", "C6", "C8")
def test_a_bound_turn_refused_stale_waits_in_dispatch_unknown_and_asks_again() -> None:
    """C6c, C6: an earlier attempt unresolved, a stale refusal keeps the turn bound in
    DISPATCH_UNKNOWN, looked at again after the backoff (C8 asks first); the reconcile
    deadline runs on."""
    before = bound(OpState.DISPATCHING, 2, unknown_since=NOW - timedelta(seconds=3))
    context = ctx(attempt(1), attempt(2, AttemptOutcome.PENDING))
    record, _ = step(before, refusal(2), context)
    assert record.state is OpState.DISPATCH_UNKNOWN and record.runner == "r1"
    assert record.next_action_at == NOW + timedelta(seconds=context.backoff_initial)
    assert record.unknown_since == NOW - timedelta(seconds=3)


@pytest.mark.rule("C6c", "C8b")
def test_a_bound_turn_at_the_end_of_a_run_gives_up_with_a_cancel_first() -> None:
    """C6c, C8b: bound, the run at its limit, an absent answer: no replay; the give-up's
    Cancel asks for a tombstone first (reason DISPATCH_STALE)."""
    rows = (attempt(1), *(stale(n) for n in range(2, STALE_STREAK_LIMIT + 2)))
    count = len(rows)
    before = bound(OpState.DISPATCH_UNKNOWN, count)
    decision = decide(before, answer(None, asked=count), ctx(*rows))
    assert decision.change is None
    (cancel,) = decision.commands
    assert isinstance(cancel, cmd.Cancel) and cancel.give_up is not None
    assert cancel.give_up.reason == "DISPATCH_STALE"
