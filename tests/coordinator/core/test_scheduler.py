"""The scheduler (issue 9), pure: slots per runner and kind, fair order across
principals, grants only where a slot is free."""

from __future__ import annotations

import collections
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.fair_queue import FairQueue
from coordinator_svc.core.model import TurnKind
from coordinator_svc.core.routing import route
from coordinator_svc.core.scheduler import UNKNOWN_SIZE_ALLOWANCE, Scheduler

W, R = TurnKind.WRITABLE, TurnKind.READ_ONLY
RUNNERS = (RunnerEndpoint("r1", "127.0.0.1:1"), RunnerEndpoint("r2", "127.0.0.1:2"))


@pytest.mark.rule("C6a", "R4")
def test_free_slots_are_counted_per_runner_and_kind() -> None:
    """C6a, R4: one count per (runner, kind) pool; a runner not heard from yet gets a
    small allowance, not unlimited room."""
    scheduler = Scheduler(RUNNERS)
    assert scheduler.free("r1", W) == UNKNOWN_SIZE_ALLOWANCE and not scheduler.known("r1")
    scheduler.learned("r1", {W: 2, R: 1})
    scheduler.bind("op1", "r1", W)
    scheduler.bind("op2", "r1", W)
    scheduler.bind("op3", "r1", R)
    assert (scheduler.free("r1", W), scheduler.free("r1", R)) == (0, 0)
    assert scheduler.unbind("op1") and not scheduler.unbind("op1")
    assert scheduler.free("r1", W) == 1
    scheduler.bind("op2", "r1", W)  # re-binding the same operation counts it once
    assert scheduler.free("r1", W) == 1
    assert scheduler.load() == {"r1": 2}


@pytest.mark.rule("C6a", "R4")
def test_grants_fill_free_slots_only_and_reserve_them() -> None:
    """C6a, R4: a turn is routed only where a slot of its kind is free; the grant holds the
    slot until the engine binds or frees it; the rest keep waiting."""
    scheduler = Scheduler(RUNNERS)
    scheduler.learned("r1", {W: 1, R: 0})
    scheduler.learned("r2", {W: 1, R: 1})
    for n in range(4):
        scheduler.hold(f"w{n}", "alice", "default", W)
    scheduler.hold("ro", "alice", "default", R)
    granted = scheduler.grants()
    assert sorted(g.runner for g in granted if g.operation_id.startswith("w")) == ["r1", "r2"]
    assert [g.runner for g in granted if g.operation_id == "ro"] == ["r2"]
    assert scheduler.waiting() == 2 and scheduler.grants() == []
    assert scheduler.unbind(granted[0].operation_id)
    again = scheduler.grants()
    assert len(again) == 1 and again[0].runner == granted[0].runner


def test_a_pool_nobody_serves_waits_and_says_so() -> None:
    """§8.2: a waiting turn is visible with its reason."""
    scheduler = Scheduler(RUNNERS)
    scheduler.learned("r1", {W: 1})
    scheduler.learned("r2", {W: 0})
    scheduler.hold("a", "alice", "default", W)
    scheduler.hold("b", "bob", "default", W)
    assert [g.operation_id for g in scheduler.grants()] == ["a"]
    reason = scheduler.wait_reason("b")
    assert reason is not None
    assert "waiting for a free WRITABLE slot in pool default: 1 of 1 in use" in reason
    assert scheduler.wait_reason("a") is None  # granted: no longer waiting


@pytest.mark.rule("C6a")
def test_a_flood_does_not_push_a_newcomer_back() -> None:
    """C6a (fair grants): with one principal's 1,000 turns waiting, another principal's
    turn is granted within one round (here: the very next slot)."""
    scheduler = Scheduler(RUNNERS[:1])
    scheduler.learned("r1", {W: 1})
    for n in range(1000):
        scheduler.hold(f"flood{n}", "flood", "default", W)
    first = scheduler.grants()
    assert [g.operation_id for g in first] == ["flood0"]
    scheduler.hold("quiet", "quiet", "default", W)
    scheduler.unbind("flood0")
    assert [g.operation_id for g in scheduler.grants()] == ["quiet"]


@pytest.mark.rule("C6a")
def test_weights_share_dispatches_in_proportion() -> None:
    """C6a (weighted fair grants): weight 3 gets three dispatches for each one of weight 1."""
    queue = FairQueue()
    for n in range(40):
        queue.push(f"heavy{n}", "heavy", weight=3.0)
        queue.push(f"light{n}", "light", weight=1.0)
    served = [queue.pop() or "" for _ in range(40)]
    heavy = sum(op.startswith("heavy") for op in served)
    assert heavy == 30, served


@pytest.mark.rule("C6a", "C11")
def test_removed_turns_are_skipped_and_a_turn_keeps_its_place() -> None:
    """C6a, C11: a turn cancelled or timed out while waiting is never granted; waiting
    again does not lose a turn its place."""
    queue = FairQueue()
    for op in ("a", "b", "c"):
        queue.push(op, "alice")
    queue.push("a", "alice")  # already waiting: keeps its place
    assert queue.remove("b") and not queue.remove("b")
    assert (len(queue), queue.pop(), queue.pop(), queue.pop()) == (2, "a", "c", None)


@pytest.mark.rule("C6", "C6a")
def test_routing_skips_full_runners_and_treats_unknown_sizes_as_room() -> None:
    """C6 (only QUEUED routes), C6a: a full runner is skipped; unknown sizes count as room."""
    load = {"r1": 0, "r2": 5}
    chosen = route("default", W, RUNNERS, load, {"r1": 0, "r2": 1})
    assert chosen is not None and chosen.name == "r2"
    assert route("default", W, RUNNERS, load, {"r1": 0, "r2": 0}) is None
    unknown = route("default", W, RUNNERS, load, {"r1": None, "r2": 0})
    assert unknown is not None and unknown.name == "r1"


def serve_all_within_the_bound(
    queue: FairQueue, remaining: collections.Counter[str], weights: dict[str, float]
) -> None:
    """Pop every turn (each id starts with its principal's one-letter name). Over any
    prefix of the service order, two principals both still waiting differ in weighted
    service by at most one turn each: service_i / w_i - service_j / w_j <= 1/w_i + 1/w_j."""
    served: collections.Counter[str] = collections.Counter()
    while (op := queue.pop()) is not None:
        served[op[0]] += 1
        remaining[op[0]] -= 1
        backlogged = [p for p in remaining if remaining[p] > 0]
        for i, j in itertools.permutations(backlogged, 2):
            lead = served[i] / weights[i] - served[j] / weights[j]
            assert lead <= 1 / weights[i] + 1 / weights[j] + 1e-9, (i, j, served)


@pytest.mark.rule("C6a")
@settings(max_examples=200, deadline=None)
@given(
    arrivals=st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=120),
    weights=st.fixed_dictionaries({p: st.sampled_from([1.0, 2.0, 4.0]) for p in "abcd"}),
)
def test_no_backlogged_principal_falls_behind_its_share(
    arrivals: list[str], weights: dict[str, float]
) -> None:
    """C6a, the start-time fair queuing bound: over any prefix of the service order, two
    principals that both still have turns waiting differ in weighted service by at
    most one turn each (service_i / w_i - service_j / w_j <= 1/w_i + 1/w_j)."""
    queue = FairQueue()
    counter = itertools.count()
    for principal in arrivals:
        queue.push(f"{principal}{next(counter)}", principal, weights[principal])
    remaining = collections.Counter(arrivals)
    serve_all_within_the_bound(queue, remaining, weights)


@pytest.mark.rule("C6a")
def test_a_turn_that_leaves_unserved_costs_its_principal_nothing() -> None:
    """C6a (found by the simulation, seed 4468): a flood's turns cancelled while waiting
    do not push its remaining turns back; it still gets every other grant."""
    queue = FairQueue()
    for n in range(10):
        queue.push(f"flood{n}", "flood")
        queue.push(f"quiet{n}", "quiet")
    for n in range(1, 9):
        assert queue.remove(f"flood{n}")
    served = [queue.pop() for _ in range(4)]
    assert served == ["flood0", "quiet0", "flood9", "quiet1"]
    queue.push("late", "flood")
    assert queue.ahead_of("late") == 1 and queue.pop() == "quiet2" and queue.pop() == "late"


@pytest.mark.rule("C6a")
@settings(max_examples=200, deadline=None)
@given(
    arrivals=st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=80),
    leaving=st.lists(st.booleans(), min_size=80, max_size=80),
    weights=st.fixed_dictionaries({p: st.sampled_from([1.0, 2.0, 3.0]) for p in "abcd"}),
)
def test_the_fair_share_bound_holds_after_turns_leave_unserved(
    arrivals: list[str], leaving: list[bool], weights: dict[str, float]
) -> None:
    """C6a: turns removed while waiting (cancelled, timed out) change nothing in the
    start-time fair queuing bound for the turns that stay."""
    queue = FairQueue()
    for n, principal in enumerate(arrivals):
        queue.push(f"{principal}{n}", principal, weights[principal])
    remaining = collections.Counter(arrivals)
    for n in [n for n in range(len(arrivals)) if leaving[n]]:
        assert queue.remove(f"{arrivals[n]}{n}")
        remaining[arrivals[n]] -= 1
    serve_all_within_the_bound(queue, remaining, weights)
    assert not +remaining


def test_a_turn_holding_a_grant_is_not_queued_again() -> None:
    """One grant at a time per turn (found by the simulation: a second tick while the
    first grant's preflight was out granted the turn a second slot on another runner)."""
    scheduler = Scheduler(RUNNERS)
    scheduler.learned("r1", {W: 1})
    scheduler.learned("r2", {W: 1})
    scheduler.hold("op", "alice", "default", W)
    assert [g.runner for g in scheduler.grants()] == ["r1"]
    scheduler.hold("op", "alice", "default", W)  # ticked again while being routed
    assert scheduler.grants() == [] and scheduler.waiting() == 0
    assert scheduler.free("r2", W) == 1


@pytest.mark.rule("C6a", "R4")
def test_slots_the_runner_reports_in_use_are_not_granted_again() -> None:
    """C6a, R4 (issue 9): the runner's own count of slots in use (another replica's turns,
    one this coordinator gave up on) leaves fewer free slots and no grant; a lower
    report (a snapshot from before this coordinator's grant) never frees a slot the
    coordinator itself still holds."""
    scheduler = Scheduler(RUNNERS[:1])
    scheduler.learned("r1", {W: 2, R: 1})
    scheduler.bind("mine", "r1", W)
    scheduler.reported("r1", {W: 2, R: 0})  # one turn there this coordinator cannot see
    assert (scheduler.free("r1", W), scheduler.free("r1", R)) == (0, 1)
    scheduler.hold("op", "alice", "default", W)
    assert scheduler.grants() == [] and scheduler.waiting() == 1
    assert "2 of 2 in use" in (scheduler.wait_reason("op") or "")
    assert scheduler.load() == {"r1": 2}
    scheduler.reported("r1", {W: 0, R: 0})  # the other turn ended; "mine" not there yet
    assert scheduler.free("r1", W) == 1
    assert [g.runner for g in scheduler.grants()] == ["r1"]
    assert scheduler.free("r1", W) == 0 and scheduler.load() == {"r1": 2}
    scheduler.hold("late", "alice", "default", W)
    scheduler.reported("r1", {W: 1, R: 0})  # lower than the coordinator's own 2
    assert scheduler.free("r1", W) == 0 and scheduler.grants() == []


@settings(max_examples=200, deadline=None)
@given(
    script=st.lists(
        st.tuples(
            st.sampled_from(["push", "pop", "remove"]), st.integers(0, 30), st.integers(0, 3)
        ),
        max_size=150,
    )
)
def test_a_turns_place_is_the_number_served_before_it(script: list[tuple[str, int, int]]) -> None:
    """Operation.waiting_for's "N waiting turn(s) go first" is exact: popping the queue
    serves exactly ``ahead_of(op)`` turns before ``op``, whatever pushes, pops and
    removals came before."""
    queue = FairQueue()
    for action, number, principal in script:
        op = f"op{number}"
        if action == "push":
            queue.push(op, f"p{principal}", weight=float(principal + 1))
        elif action == "pop":
            queue.pop()
        else:
            queue.remove(op)
    places = {op: queue.ahead_of(op) for op in [f"op{n}" for n in range(31)] if op in queue}
    served = []
    while (op := queue.pop()) is not None:
        served.append(op)
    assert places == {op: served.index(op) for op in places}


@pytest.mark.rule("C1a")
def test_a_turn_granted_at_once_only_when_nothing_of_its_class_waits() -> None:
    """C1a: a new turn is routed at acceptance only where holding it would grant it
    at once: a slot is free and no turn of its (pool, kind) waits ahead of it.
    Otherwise nothing changes and it is held like any other."""
    scheduler = Scheduler(RUNNERS)
    scheduler.learned("r1", {W: 1, R: 1})
    scheduler.learned("r2", {W: 0, R: 0})
    assert scheduler.grant_at_once("a", "alice", "default", W) == "r1"
    assert scheduler.free("r1", W) == 0 and scheduler.bound_to("a") == "r1"
    assert scheduler.grant_at_once("b", "bob", "default", W) is None  # no free slot
    assert scheduler.waiting() == 0 and scheduler.bound_to("b") is None
    scheduler.hold("b", "bob", "default", W)
    assert scheduler.unbind("a")  # a slot frees, but b waits for it first
    assert scheduler.grant_at_once("c", "carol", "default", W) is None
    assert scheduler.grant_at_once("r", "carol", "default", R) == "r1"  # another class
    assert [(g.operation_id, g.runner) for g in scheduler.grants()] == [("b", "r1")]
    assert scheduler.grant_at_once("a", "alice", "default", W) is None  # b holds it now


@pytest.mark.rule("C1a", "C6a")
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["alice", "bob", "carol"]), st.booleans()), max_size=30))
def test_a_grant_at_once_counts_as_hold_then_grant(script: list[tuple[str, bool]]) -> None:
    """C1a keeps C6a's fairness: a scheduler that grants new turns at once (when it
    can) and one that holds them and grants serve the same turns in the same order,
    whatever arrives and whenever slots free (True: a slot frees first)."""
    at_once, held = Scheduler(RUNNERS[:1]), Scheduler(RUNNERS[:1])
    served: dict[int, list[str]] = {id(at_once): [], id(held): []}
    bound: dict[int, list[str]] = {id(at_once): [], id(held): []}

    def granted(scheduler: Scheduler, ops: list[str]) -> None:
        served[id(scheduler)].extend(ops)
        bound[id(scheduler)].extend(ops)

    for scheduler in (at_once, held):
        scheduler.learned("r1", {W: 2})
    for n, (principal, frees) in enumerate(script):
        for scheduler in (at_once, held):
            if frees and bound[id(scheduler)]:
                scheduler.unbind(bound[id(scheduler)].pop(0))
                granted(scheduler, [g.operation_id for g in scheduler.grants()])
        op = f"t{n}"
        if at_once.grant_at_once(op, principal, "default", W) is not None:
            granted(at_once, [op])
        else:
            at_once.hold(op, principal, "default", W)
        held.hold(op, principal, "default", W)
        granted(held, [g.operation_id for g in held.grants()])
    assert served[id(at_once)] == served[id(held)]
    assert at_once.waiting() == held.waiting()
