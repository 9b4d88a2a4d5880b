"""C6b, pure: a QUEUED turn is routed only to a runner that serves its executor
(as its GetRunnerInfo said), waits in words when none does, and a submit is
refused only when that is proven."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.model import TurnKind
from coordinator_svc.core.routing import (
    DEFAULT_EXECUTOR,
    NoRunnerForExecutor,
    executor_name,
    executor_refusal,
    offers,
    route,
)
from coordinator_svc.core.scheduler import Scheduler

W = TurnKind.WRITABLE
RUNNERS = (RunnerEndpoint("r1", "127.0.0.1:1"), RunnerEndpoint("r2", "127.0.0.1:2"))


def _scheduler(**executors: tuple[str, ...]) -> Scheduler:
    scheduler = Scheduler(RUNNERS)
    for runner in ("r1", "r2"):
        scheduler.learned(runner, {W: 4})
    for runner, names in executors.items():
        scheduler.learned_executors(runner, names)
    return scheduler


@pytest.mark.rule("C6b", "R14")
def test_a_runner_that_said_serves_exactly_its_names_one_that_did_not_only_default() -> None:
    """C6b: said -> those names; not said yet -> ``default`` only (a wrong guess
    is R14's definite refusal); an empty Turn.executor is ``default``."""
    assert offers(frozenset({"alpha"}), "alpha") and not offers(frozenset({"alpha"}), "beta")
    assert not offers(frozenset({"alpha"}), DEFAULT_EXECUTOR)
    assert offers(None, DEFAULT_EXECUTOR) and not offers(None, "alpha")
    assert executor_name("") == DEFAULT_EXECUTOR and executor_name("alpha") == "alpha"


@pytest.mark.rule("C6b", "C6a")
def test_route_skips_a_less_loaded_runner_that_does_not_serve_the_executor() -> None:
    """C6b over C6a's least-loaded choice: r2 is idle but serves only beta."""
    said = {"r1": frozenset({"alpha"}), "r2": frozenset({"beta"})}
    load = {"r1": 3}
    chosen = route("default", W, RUNNERS, load, executor="alpha", executors=said)
    assert chosen is not None and chosen.name == "r1"
    assert route("default", W, RUNNERS, load, executor="gamma", executors=said) is None


@pytest.mark.rule("C6b")
def test_grants_go_only_to_runners_serving_each_turns_executor() -> None:
    """C6b: each grant's runner serves the turn's executor; a turn for one no
    runner serves is not granted and stays held."""
    scheduler = _scheduler(r1=("alpha", "shared"), r2=("beta", "shared"))
    turns = {"a1": "alpha", "a2": "alpha", "b1": "beta", "s1": "shared", "g1": "gamma"}
    for op, executor in turns.items():
        scheduler.hold(op, "alice", "default", W, executor)
    granted = {grant.operation_id: grant.runner for grant in scheduler.grants()}
    assert granted["a1"] == granted["a2"] == "r1" and granted["b1"] == "r2"
    assert granted["s1"] in {"r1", "r2"} and "g1" not in granted
    assert scheduler.holding("g1")


@pytest.mark.rule("C6b")
def test_executors_sharing_a_runner_take_its_free_slots_in_turn() -> None:
    """C6b: classes that differ only in executor share a runner's slots one grant
    each per round, so a backlog for one executor does not starve another."""
    scheduler = _scheduler(r1=("alpha", "beta"), r2=())
    scheduler.learned("r1", {W: 4})
    for n in range(10):
        scheduler.hold(f"a{n}", "alice", "default", W, "alpha")
    for n in range(2):
        scheduler.hold(f"b{n}", "alice", "default", W, "beta")
    granted = sorted(grant.operation_id for grant in scheduler.grants())
    assert granted == ["a0", "a1", "b0", "b1"]


@pytest.mark.rule("C6b")
def test_a_turn_no_runner_serves_says_what_each_runner_serves() -> None:
    """C6b, §8.2: the wait is visible with its reason, naming the executor and what
    each runner of the pool said (or that it has not said yet)."""
    scheduler = _scheduler(r1=("alpha", "beta"))
    scheduler.hold("op", "alice", "default", W, "words")
    assert scheduler.wait_reason("op") == (
        "waiting for a runner that serves executor 'words' in pool default: r1 serves "
        "alpha, beta; r2 has not said which executors it serves (no GetRunnerInfo)"
    )
    scheduler.learned_executors("r2", ("words",))
    (grant,) = scheduler.grants()
    assert grant.runner == "r2" and scheduler.wait_reason("op") is None


@pytest.mark.rule("C1a", "C6b")
def test_grant_at_once_only_to_a_runner_serving_the_executor() -> None:
    """C1a under C6b: the first attempt rides with the acceptance only to a runner
    that serves the turn's executor; otherwise nothing is reserved."""
    scheduler = _scheduler(r1=("alpha",), r2=("beta",))
    assert scheduler.grant_at_once("b", "alice", "default", W, "beta") == "r2"
    assert scheduler.grant_at_once("g", "alice", "default", W, "gamma") is None
    assert scheduler.bound_to("g") is None and not scheduler.holding("g")


@pytest.mark.rule("M5", "C6b")
def test_a_runner_that_leaves_forgets_what_it_said() -> None:
    """M5 with C6b: a member added again under the name starts not said."""
    scheduler = _scheduler(r1=("alpha",))
    scheduler.forget("r1")
    assert scheduler.executors_of("r1") is None


@pytest.mark.rule("C6b")
def test_submit_is_refused_only_when_every_runner_of_the_pool_has_said() -> None:
    """C6b at submit: proven only when every runner serving (pool, kind) said what it
    serves and none serves the executor; a runner not heard from keeps it open."""
    said = {"r1": frozenset({"alpha"}), "r2": frozenset({"beta"})}
    refusal = executor_refusal("default", W, "gamma", RUNNERS, said)
    assert refusal == NoRunnerForExecutor("gamma", ("alpha", "beta"))
    assert executor_refusal("default", W, "beta", RUNNERS, said) is None
    assert executor_refusal("default", W, "gamma", RUNNERS, {"r1": said["r1"]}) is None
    # Another pool's runners are not asked (NO_RUNNER_FOR_TURN covers a pool nobody serves).
    assert executor_refusal("gpu", W, "gamma", RUNNERS, said) is None


@pytest.mark.rule("C6b", "C6a")
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["alpha", "beta", "shared", "gamma"]), min_size=1, max_size=30),
    st.integers(min_value=1, max_value=5),
)
def test_no_grant_ever_goes_to_a_runner_not_serving_the_executor(
    executors: list[str], slots: int
) -> None:
    """C6b, property: over any mix of turns, every grant's runner serves the
    turn's executor, and no runner gets more grants than its slots (C6a)."""
    served = {"r1": frozenset({"alpha", "shared"}), "r2": frozenset({"beta", "shared"})}
    scheduler = Scheduler(RUNNERS)
    for runner, names in served.items():
        scheduler.learned(runner, {W: slots})
        scheduler.learned_executors(runner, names)
    for n, executor in enumerate(executors):
        scheduler.hold(f"op{n}", f"p{n % 3}", "default", W, executor)
    per_runner: dict[str, int] = {}
    for grant in scheduler.grants():
        executor = executors[int(grant.operation_id[2:])]
        assert executor in served[grant.runner]
        per_runner[grant.runner] = per_runner.get(grant.runner, 0) + 1
    assert all(count <= slots for count in per_runner.values())
