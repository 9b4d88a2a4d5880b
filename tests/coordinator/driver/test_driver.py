"""The driver's grant and commit rules (coordinator_svc.driver.driver): what a
grant reserves, what its end frees, and what a commit moves, with the real
scheduler (core.scheduler) and no clock but the one passed in."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.decision import Context
from coordinator_svc.core.events import RunnerIdentity
from coordinator_svc.core.model import OpState, TurnKind
from coordinator_svc.core.scheduler import Scheduler
from coordinator_svc.driver.driver import Driver, Timings
from coordinator_svc.driver.runners import Runners
from tests.coordinator.core.scenario import INC_A, NOW, RUNNER, STORE, bound, queued

IDENTITY = RunnerIdentity(INC_A, STORE)


def driver_with_one_slot() -> Driver:
    scheduler = Scheduler([RunnerEndpoint(RUNNER, "127.0.0.1:1")])
    scheduler.learned(RUNNER, {TurnKind.WRITABLE: 1, TurnKind.READ_ONLY: 1})
    return Driver(scheduler, Timings(backoff_initial=0.1, backoff_max=1.0))


def granted_turn(driver: Driver) -> str:
    record = queued()
    driver.scheduler.hold(record.operation_id, record.principal, record.pool, record.kind)
    (grant,) = driver.scheduler.grants()
    tick = driver.granted(grant, RunnerIdentity(INC_A, STORE))
    assert tick.route == RUNNER and tick.route_identity == RunnerIdentity(INC_A, STORE)
    return grant.operation_id


@pytest.mark.rule("C6")
def test_a_grant_reserves_its_slot_until_it_ends() -> None:
    """C6: while a grant routes a turn, its step is told so and its slot stays
    reserved; a grant that ends with nothing bound frees the slot."""
    driver = driver_with_one_slot()
    op = granted_turn(driver)
    assert driver.routing(op)
    assert driver.scheduler.in_use(RUNNER, TurnKind.WRITABLE) == 1
    ended = driver.grant_ended(op, None, NOW)
    assert ended.freed and not driver.routing(op)
    assert driver.scheduler.in_use(RUNNER, TurnKind.WRITABLE) == 0


@pytest.mark.rule("C6a")
def test_a_turn_still_queued_after_its_grant_waits_out_its_backoff_or_waits_again() -> None:
    """C6a: a refused turn back in QUEUED with a later time waits until then; with
    none, it is held for the next grant at once."""
    driver = driver_with_one_slot()
    op = granted_turn(driver)
    later = NOW + timedelta(seconds=3)
    refused = queued(next_action_at=later, attempt_count=1)
    driver.committed(refused, NOW)
    ended = driver.grant_ended(op, refused, NOW)
    assert ended.freed and ended.wait_until == later and not ended.hold_again
    plain = driver_with_one_slot()
    op = granted_turn(plain)
    ended = plain.grant_ended(op, queued(), NOW)
    assert ended.hold_again and ended.wait_until is None


def test_a_bound_turn_keeps_its_slot_after_its_grant_and_its_end_frees_it() -> None:
    """The slot ledger follows the journal: a write-ahead binds the slot, the
    grant's end keeps it, the terminal commit frees it (route what fits)."""
    driver = driver_with_one_slot()
    op = granted_turn(driver)
    sent = bound(OpState.DISPATCHING)
    assert not driver.committed(sent, NOW)
    assert not driver.grant_ended(op, sent, NOW).freed
    assert driver.scheduler.in_use(RUNNER, TurnKind.WRITABLE) == 1
    done = dataclasses.replace(bound(OpState.SUCCEEDED), finished_at=NOW)
    assert driver.committed(done, NOW)
    assert driver.scheduler.in_use(RUNNER, TurnKind.WRITABLE) == 0
    assert len(driver.memory) == 0


def test_a_commit_ends_the_streak_and_leaves_nothing_of_an_ended_turn() -> None:
    """A commit ends the streak of fruitless tries; a terminal one forgets the
    turn's times and limits: nothing of it stays in memory."""
    driver = driver_with_one_slot()
    driver.agenda.failed("op_1")
    driver.memory.update("op_1", limits=(None, NOW))
    driver.committed(bound(OpState.RUNNING), NOW)
    assert driver.agenda.streak("op_1") == 0
    driver.committed(dataclasses.replace(bound(OpState.FAILED), finished_at=NOW), NOW)
    assert "op_1" not in driver.memory


@pytest.mark.rule("O3")
def test_an_adopted_operation_is_counted_in_the_slot_ledger() -> None:
    """O3: an operation adopted bound to a runner holds a slot there from now on."""
    driver = driver_with_one_slot()
    driver.adopted(bound(OpState.DISPATCH_UNKNOWN))
    assert driver.scheduler.in_use(RUNNER, TurnKind.WRITABLE) == 1


def _context() -> Context:
    return Context(now=NOW)


@pytest.mark.rule("C1a")
def test_a_turn_that_can_be_sent_at_once_has_its_first_attempt_decided_with_its_acceptance() -> (
    None
):
    """C1a: with a free slot, nothing of its class waiting and the runner's
    identity known, the write-ahead is decided now and its slot is reserved as
    a grant's; the grant's end with the attempt bound keeps the slot."""
    driver = driver_with_one_slot()
    record = queued()
    decision = driver.first_attempt(record, lambda runner: IDENTITY, _context())
    assert decision is not None and decision.change is not None
    assert decision.change.after.state is OpState.DISPATCHING
    assert decision.change.after.incarnation_id == INC_A
    assert driver.routing(record.operation_id)
    assert driver.scheduler.in_use(RUNNER, TurnKind.WRITABLE) == 1


@pytest.mark.rule("C2a", "C1a")
def test_no_first_attempt_rides_along_without_a_known_identity_or_a_free_slot() -> None:
    """C2a, C1a: no live watch knowing the runner, or no free slot: nothing is decided
    and nothing is reserved (the turn is stored QUEUED and waits for a grant)."""
    driver = driver_with_one_slot()
    record = queued()
    assert driver.first_attempt(record, lambda runner: None, _context()) is None
    assert driver.scheduler.in_use(RUNNER, TurnKind.WRITABLE) == 0
    assert not driver.routing(record.operation_id)
    granted_turn(driver)  # the one slot is taken now
    other = queued(operation_id="op_2")
    assert driver.first_attempt(other, lambda runner: IDENTITY, _context()) is None
    assert not driver.routing("op_2")


def test_one_drive_at_a_time_and_a_wake_during_it_is_owed_not_lost() -> None:
    """A wake while a drive runs starts no second drive; the drive's end asks for
    one more look. Regression: a queue-timeout timer that fired a moment early
    re-armed itself and fired again during the drive it had started; that wake
    was dropped and the turn stayed QUEUED past its queue timeout for good
    (tests/packaging/test_version_skew.py, about 1 run in 3)."""
    driver = driver_with_one_slot()
    assert driver.tick_wanted("op_1")
    assert not driver.tick_wanted("op_1")  # during the drive: owed
    assert driver.drive_ended("op_1")  # look again now
    assert driver.tick_wanted("op_1")
    assert not driver.drive_ended("op_1")  # nothing came meanwhile
    assert "op_1" not in driver.memory


@pytest.mark.rule("C2a", "C1a")
def test_no_first_attempt_rides_along_to_a_runner_not_heard_from_lately() -> None:
    """C2a, C1a (issue 27): the identity is known but the runner's watch has been quiet
    longer than live_within: nothing is decided or reserved; heard from just now, the
    first attempt rides with the acceptance, bound to that identity."""
    driver = driver_with_one_slot()
    runners = Runners(live_within=0.5)
    runners.identified(RUNNER, IDENTITY, NOW - timedelta(seconds=1))
    record = queued()

    def identity_of(runner: str) -> RunnerIdentity | None:
        return runners.live_identity(runner, NOW)

    assert driver.first_attempt(record, identity_of, _context()) is None
    assert driver.scheduler.in_use(RUNNER, TurnKind.WRITABLE) == 0
    runners.heard(RUNNER, NOW - timedelta(seconds=0.1))
    decision = driver.first_attempt(record, identity_of, _context())
    assert decision is not None and decision.change is not None
    assert decision.change.after.incarnation_id == INC_A
