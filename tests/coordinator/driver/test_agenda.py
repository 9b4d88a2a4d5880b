"""The agenda (issue 9): timers and retry streaks as decisions, without a clock."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from coordinator_svc.core.model import OpState
from coordinator_svc.driver.agenda import Agenda
from tests.coordinator.core.scenario import NOW, bound, queued


def test_backoff_grows_with_the_streak_and_a_commit_ends_it() -> None:
    """One backoff formula (turnwire.backoff): 2x per fruitless try, capped; a commit resets."""
    agenda = Agenda(backoff_initial=0.1, backoff_max=0.5)
    record = bound(OpState.RUNNING)
    op = record.operation_id
    waits = [(agenda.backoff(op, NOW) - NOW).total_seconds() for _ in range(5)]
    assert waits == [0.2, 0.4, 0.5, 0.5, 0.5]
    assert agenda.waiting(op, NOW) and not agenda.waiting(op, NOW + timedelta(seconds=1))
    assert agenda.streak(op) == 5
    agenda.committed(record, NOW)
    assert agenda.streak(op) == 0 and agenda.failed(op) == 1


def test_a_schedule_needs_a_timer_only_where_the_journal_would_come_back_later() -> None:
    """The due scan finds an operation at its next_action_at, and never a QUEUED one
    (the scheduler holds those): a ScheduleAt before that, or for QUEUED, needs a timer."""
    agenda = Agenda(backoff_initial=0.1, backoff_max=1.0)
    soon, later = NOW + timedelta(seconds=1), NOW + timedelta(seconds=9)
    running = dataclasses.replace(bound(OpState.RUNNING), next_action_at=later)
    assert agenda.scheduled(running, soon)
    assert not agenda.scheduled(running, later + timedelta(seconds=1))
    assert agenda.scheduled(dataclasses.replace(queued(), next_action_at=NOW), later)


@pytest.mark.rule("C6a")
def test_a_refusal_sending_a_turn_back_to_queued_waits_until_its_retry_time() -> None:
    """C6a: QUEUED with a later next_action_at waits until then; terminal forgets it."""
    agenda = Agenda(backoff_initial=0.1, backoff_max=1.0)
    retry = NOW + timedelta(seconds=2)
    waiting = dataclasses.replace(queued(), next_action_at=retry)
    agenda.committed(waiting, NOW)
    assert agenda.not_before(waiting.operation_id) == retry
    agenda.committed(dataclasses.replace(waiting, state=OpState.CANCELLED), NOW)
    assert agenda.not_before(waiting.operation_id) is None
