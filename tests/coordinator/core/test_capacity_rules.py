"""Issue 9 (first slice): a full runner's refusal is not held against the turn."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.decide import decide
from coordinator_svc.core.events import DispatchRefused, Tick
from coordinator_svc.core.model import AttemptOutcome, AttemptRecord, Execution, OpState
from tests.coordinator.core.scenario import INC_A, NOW, answer, attempt, bound, ctx, queued, step


def refused(number: int, reason: str) -> AttemptRecord:
    return dataclasses.replace(
        attempt(number, AttemptOutcome.REFUSED), detail=f"{reason}: the runner said so"
    )


@pytest.mark.rule("C6a")
def test_capacity_refusals_never_count_toward_max_attempts() -> None:
    """C6a: five NO_FREE_SLOT refusals with max_attempts=2: still sent again."""
    rows = tuple(refused(n, "NO_FREE_SLOT") for n in range(1, 6))
    before = queued(attempt_count=5, max_attempts=2, last_event_sequence=11)
    record, _ = step(before, answer(None, asked=5), ctx(*rows))
    assert record.state is OpState.DISPATCHING and record.attempt_count == 6


@pytest.mark.rule("C6a")
def test_other_definite_refusals_still_count() -> None:
    """C6a, §3 max_attempts: any other definite refusal counts as before."""
    rows = (refused(1, "STORE_WRITE_FAILED"), refused(2, "INCARNATION_MISMATCH"))
    before = queued(attempt_count=2, max_attempts=2, last_event_sequence=5)
    record, _ = step(before, answer(None, asked=2), ctx(*rows))
    assert record.state is OpState.TIMED_OUT and record.error_reason == "MAX_ATTEMPTS_EXCEEDED"


@pytest.mark.rule("C6", "C6a")
def test_a_full_runner_sends_the_turn_back_to_wait_with_its_reason() -> None:
    """C6, C6a: back to QUEUED unbound, the event names what it waits for, capped backoff."""
    earlier = tuple(refused(n, "SHUTTING_DOWN") for n in range(1, 10))
    pending = attempt(10, AttemptOutcome.PENDING)
    before = bound(OpState.DISPATCHING, 10)
    context = ctx(*earlier, pending)
    decision = decide(before, DispatchRefused(10, "NO_FREE_SLOT", INC_A, "4 in use"), context)
    assert decision.change is not None
    after = decision.change.after
    assert after.state is OpState.QUEUED and after.runner is None
    event = decision.change.event
    assert event is not None
    assert event.detail.startswith("waiting for a free WRITABLE slot in pool default")
    assert "NO_FREE_SLOT" in event.detail
    # Backoff grows with the streak of refusals, capped: the turn keeps asking.
    assert after.next_action_at is not None
    assert after.next_action_at <= NOW + timedelta(seconds=context.backoff_max)


@pytest.mark.rule("C6a", "C14")
def test_a_queued_turn_past_its_deadline_ends_timed_out_not_started() -> None:
    """C6a, C14: the coordinator enforces the turn's deadline on a waiting turn: NOT_STARTED."""
    rows = (refused(1, "NO_FREE_SLOT"),)
    before = queued(attempt_count=1, last_event_sequence=3)
    late = ctx(*rows, turn_deadline=NOW - timedelta(seconds=1))
    record, decision = step(before, Tick(route=None), late)
    assert record.state is OpState.TIMED_OUT and record.error_reason == "DEADLINE_EXCEEDED"
    assert record.execution is Execution.NOT_STARTED
    assert not any(isinstance(c, cmd.Preflight) for c in decision.commands)


@pytest.mark.rule("C6a")
def test_a_waiting_turn_looks_again_no_later_than_its_deadline() -> None:
    """C6a: the wait is scheduled no later than the turn's deadline."""
    soon = NOW + timedelta(milliseconds=10)
    decision = decide(queued(), Tick(route=None, retry_streak=9), ctx(turn_deadline=soon))
    assert decision.change is None
    assert decision.commands == (cmd.ScheduleAt(soon),)


@pytest.mark.rule("C14")
def test_a_queued_turn_past_its_queue_timeout_ends_timed_out_queue_timeout() -> None:
    """Issue 9: the queue timeout ends a turn that waited QUEUED too long: NOT_STARTED (C14)."""
    before = queued()
    late = ctx(queue_deadline=NOW - timedelta(milliseconds=1))
    record, decision = step(before, Tick(), late)
    assert record.state is OpState.TIMED_OUT and record.error_reason == "QUEUE_TIMEOUT"
    assert record.execution is Execution.NOT_STARTED
    assert "queue timeout" in (record.error_message or "")
    assert not any(isinstance(c, cmd.Preflight) for c in decision.commands)


def test_a_held_turn_looks_again_at_its_first_time_limit_only() -> None:
    """Issue 9: a turn held by the scheduler is not polled: it is looked at again only at
    the earlier of its deadline and its queue timeout, or when a slot is granted."""
    deadline, queue_deadline = NOW + timedelta(seconds=9), NOW + timedelta(seconds=3)
    held = decide(queued(), Tick(waiting="waiting for a free slot"), ctx(turn_deadline=deadline))
    assert held.change is None and held.commands == (cmd.ScheduleAt(deadline),)
    both = ctx(turn_deadline=deadline, queue_deadline=queue_deadline)
    assert decide(queued(), Tick(), both).commands == (cmd.ScheduleAt(queue_deadline),)
    assert decide(queued(), Tick(), ctx()).commands == ()
    granted = decide(queued(), Tick(route="runner-a"), both)
    assert granted.commands == (cmd.Preflight("runner-a"),)
