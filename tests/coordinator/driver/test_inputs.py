"""The driver's rules for what the watch streams report (driver.inputs) and
for runners that stop answering (driver.runners)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from coordinator_svc.core.events import RunnerIdentity
from coordinator_svc.core.model import Execution
from coordinator_svc.core.runner_view import RunnerOpState
from coordinator_svc.driver.inputs import ReportLane, route_report
from coordinator_svc.driver.runners import UNREACHABLE_AFTER, Runners
from tests.coordinator.core.scenario import NOW, row


@pytest.mark.rule("C9")
def test_a_reported_row_with_no_reply_on_the_way_is_decided() -> None:
    """C9: with no Dispatch reply held, every unreleased row is decided as a report."""
    running = row(RunnerOpState.RUNNING, Execution.STARTED)
    assert route_report(running, dispatching=False) is ReportLane.DECIDE


@pytest.mark.rule("R3")
def test_a_confirmed_start_rides_on_the_held_reply() -> None:
    """R3: while the Dispatch reply is held, an unsettled row's confirmed start
    goes to the reply (the RUNNING commit records STARTED); another unsettled
    row is the reply's to decide."""
    started = row(RunnerOpState.RUNNING, Execution.STARTED)
    launching = row(RunnerOpState.RUNNING, Execution.NOT_STARTED)
    assert route_report(started, dispatching=True) is ReportLane.START_RIDES_ON_REPLY
    assert route_report(launching, dispatching=True) is ReportLane.REPLY_DECIDES


@pytest.mark.rule("C9")
def test_a_settled_row_ends_the_hold_and_is_decided_and_a_released_one_needs_nothing() -> None:
    """C9: A settled row while the reply is held ends the wait and is decided at once;
    a released row (released only after our terminal commit) needs nothing."""
    done = row(RunnerOpState.SUCCEEDED, Execution.STARTED)
    assert route_report(done, dispatching=True) is ReportLane.SETTLED_WHILE_HELD
    released = row(RunnerOpState.SUCCEEDED, Execution.STARTED, released=True)
    assert route_report(released, dispatching=True) is ReportLane.NOTHING
    assert route_report(released, dispatching=False) is ReportLane.NOTHING


def test_a_runner_is_left_out_of_routing_only_after_a_streak_of_unanswered_calls() -> None:
    """One lost call is not an outage: only UNREACHABLE_AFTER in a row leave a
    runner out, and its next answer brings it back (and says so)."""
    runners = Runners()
    for _ in range(UNREACHABLE_AFTER - 1):
        runners.unanswered("r1")
    for _ in range(UNREACHABLE_AFTER):
        runners.unanswered("r2")
    assert runners.unreachable() == {"r2"}
    assert "3 call(s) in a row unanswered" in runners.silence("r2")
    assert not runners.answered("r1") and runners.answered("r2")
    assert runners.unreachable() == frozenset() and not runners.answered("r3")
    assert runners.silence("r2") == ""


@pytest.mark.rule("C2a")
def test_a_runners_record_holds_its_identity_and_its_silence_until_it_leaves() -> None:
    """C2a: the identity a live watch told is known until the watch takes it back;
    a silent watch says since when and why; a runner that left leaves nothing."""
    runners = Runners()
    runners.identified("r1", RunnerIdentity("a" * 32, "st_1"))
    assert runners.of("r1").identity == RunnerIdentity("a" * 32, "st_1")
    runners.down("r1", "connection refused", NOW)
    runners.down("r1", "still refused", NOW + timedelta(seconds=5))
    said = runners.silence("r1")
    assert NOW.isoformat() in said and "still refused" in said
    runners.up("r1")
    assert runners.silence("r1") == ""
    runners.forget("r1")
    assert runners.of("r1").identity is None


@pytest.mark.rule("C2a")
def test_a_first_attempt_may_skip_its_preflight_only_while_the_runner_is_known_live() -> None:
    """C2a (issue 27): the identity a live watch told counts for a never-sent first
    attempt only within ``live_within`` of the last thing it delivered; a heartbeat or a
    row renews it; a stream that is not live forgets it, and a message then changes
    nothing."""
    runners = Runners(live_within=0.5)
    identity = RunnerIdentity("a" * 32, "st_1")
    runners.identified("r1", identity, NOW)
    assert runners.live_identity("r1", NOW + timedelta(seconds=0.5)) == identity
    quiet = NOW + timedelta(seconds=0.6)
    assert runners.live_identity("r1", quiet) is None  # quiet too long: ask first
    assert runners.of("r1").identity == identity  # still who it is, just not known live
    runners.heard("r1", quiet)
    assert runners.live_identity("r1", quiet + timedelta(seconds=0.4)) == identity
    runners.identified("r1", None)
    runners.heard("r1", quiet)
    assert runners.live_identity("r1", quiet) is None
    runners.identified("r2", identity)  # told without a time: never known live
    assert runners.live_identity("r2", NOW) is None


@pytest.mark.rule("C6c")
def test_a_runners_run_of_stale_refusals_is_said_from_the_third_and_ends_when_it_admits() -> None:
    """C6c: the third DISPATCH_STALE in a row from one runner asks for the one warning of
    the run and puts what the last showed in every waiting turn's words; an admitted
    Dispatch ends the run."""
    runners = Runners()
    assert not runners.refused_stale("r1", "late")
    assert not runners.refused_stale("r1", "late again")
    assert runners.stale_note("r1") == ""
    assert runners.refused_stale("r1", "clock skew: runner r1's clock reads ahead")
    assert not runners.refused_stale("r1", "clock skew: still")  # warned once per run
    note = runners.stale_note("r1")
    assert "refused its last 4 Dispatches as stale" in note and "clock skew: still" in note
    runners.admitted("r1")
    assert runners.stale_note("r1") == "" and runners.of("r1").stale == 0
