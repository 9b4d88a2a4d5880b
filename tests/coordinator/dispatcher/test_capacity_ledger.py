"""The coordinator's slot ledger and capacity-aware routing (issue 9), without I/O."""

from __future__ import annotations

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.model import TurnKind
from coordinator_svc.core.routing import route
from coordinator_svc.dispatcher.capacity import Capacity

W, R = TurnKind.WRITABLE, TurnKind.READ_ONLY


def test_free_slots_are_counted_per_runner_and_kind() -> None:
    """C6a, R4: one count per (runner, kind) pool; unknown until GetRunnerInfo."""
    capacity = Capacity()
    assert capacity.free("r1", W) is None  # unknown until GetRunnerInfo
    capacity.learned("r1", {W: 2, R: 1})
    capacity.bind("op1", "r1", W)
    capacity.bind("op2", "r1", W)
    capacity.bind("op3", "r1", R)
    assert (capacity.free("r1", W), capacity.free("r1", R)) == (0, 0)
    assert capacity.unbind("op1") and not capacity.unbind("op1")
    assert capacity.free("r1", W) == 1
    capacity.bind("op2", "r1", W)  # re-binding the same operation counts it once
    assert capacity.free("r1", W) == 1
    assert capacity.load() == {"r1": 2}


def test_waiters_are_woken_oldest_first_and_leave_the_queue_when_bound() -> None:
    """C6a: freed slots go to the longest-waiting turn first."""
    capacity = Capacity()
    for op in ("a", "b", "c"):
        capacity.wait(op)
    capacity.wait("a")  # already waiting: keeps its place
    capacity.bind("b", "r1", W)  # got a slot some other way
    assert [capacity.next_waiting(), capacity.next_waiting(), capacity.next_waiting()] == [
        "a",
        "c",
        None,
    ]


def test_routing_skips_full_runners_and_treats_unknown_sizes_as_room() -> None:
    """C6 (only QUEUED routes), C6a: a full runner is skipped; unknown sizes count as room."""
    runners = [RunnerEndpoint("r1", "127.0.0.1:1"), RunnerEndpoint("r2", "127.0.0.1:2")]
    load = {"r1": 0, "r2": 5}
    chosen = route("default", W, runners, load, {"r1": 0, "r2": 1})
    assert chosen is not None and chosen.name == "r2"
    assert route("default", W, runners, load, {"r1": 0, "r2": 0}) is None
    unknown = route("default", W, runners, load, {"r1": None, "r2": 0})
    assert unknown is not None and unknown.name == "r1"
