"""Teeth: deliberately broken policies (wrappers around the core's decide) are caught."""

from __future__ import annotations

import pytest

from tests.simulation.broken_policies import (
    BROKEN,
    replay_after_changed_incarnation,
    skip_preflight,
    stale_is_a_full_runner,
    timeout_is_refusal,
    trust_the_store_blindly,
)
from tests.simulation.broken_schedulers import first_come_first_served, ignores_slots
from tests.simulation.budget import run_budget
from tests.simulation.sim_scheduling import SchedulerFactory
from tests.simulation.simulator import PolicyFactory, RunnerSpec, Setup, SimConfig, replay

SEEDS = range(2000)


@pytest.mark.rule("C2", "C4", "C7", "C8", "C14")
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_checker_catches_a_broken_policy(name: str) -> None:
    """§8: each classic mistake (C2, C4, C7, C8, C14) breaks an invariant within the CI budget."""
    result = run_budget(
        SEEDS, SimConfig(steps=70, trace=False), BROKEN[name], stop_on_violation=True
    )
    assert result.violations, f"{name} survived {result.schedules} schedules"
    seed, violation = result.violations[0]
    print(f"{name}: caught at seed {seed}: {violation}")


@pytest.mark.rule("C6c")
def test_stale_refusals_re_sent_without_end_are_caught() -> None:
    """C6c teeth: read as a full runner's, a DISPATCH_STALE refusal is re-sent for ever
    (a replica whose clock runs behind the runners' by more than their window is
    refused every Dispatch); the checker stops it after STALE_STREAK_LIMIT in a row,
    and the real core, which ends such a turn there, survives the same seeds."""
    config = SimConfig(steps=70, trace=False)
    result = run_budget(SEEDS, config, stale_is_a_full_runner, stop_on_violation=True)
    assert result.violations, f"survived {result.schedules} schedules"
    seed, violation = result.violations[0]
    assert violation.startswith("[C6c bounded]"), violation
    correct = run_budget(range(seed + 1), config)
    assert not correct.violations, correct.violations[:1]
    assert correct.coverage["reason:DISPATCH_STALE"] >= 1
    print(f"stale_is_a_full_runner: seed {seed}: {violation}")


@pytest.mark.parametrize(
    "broken",
    [replay_after_changed_incarnation, skip_preflight, timeout_is_refusal],
    ids=lambda f: f.__name__,
)
def test_a_broken_policy_really_bills_a_turn_twice_or_lies(broken: PolicyFactory) -> None:
    """§8.1/§8.3: with the structural proof checks off, the ledger itself shows the harm."""
    # The ledger's harm is the point: no runner set changes (§11 schedules), whose
    # first harm under these policies can be of another kind (a shell loop).
    config = SimConfig(steps=70, trace=False, check_proofs=False, membership_share=0.0)
    result = run_budget(SEEDS, config, broken, stop_on_violation=True)
    assert result.violations, f"{broken.__name__} caused no harm in {result.schedules} schedules"
    seed, violation = result.violations[0]
    assert violation.startswith(("[1 at most once]", "[3 execution]")), violation
    print(f"{broken.__name__}: seed {seed}: {violation}")


# A Dispatch runs on r1 but its reply is lost; the coordinator's status call
# is lost too; r1 restarts on a copy of its store taken before the Dispatch.
RESTORED_COPY_SETUP = Setup((RunnerSpec("r1", durable=True, slots=1),), operations=1)
RESTORED_COPY_STEPS = [
    "restart r1 kept",  # snapshot 0: an empty store
    "submit PROBE_FIRST 3 WRITABLE",
    "tick op4 r1",
    "deliver m1",
    "deliver m2",  # attempt 1 written ahead and sent
    "deliver m3",  # accepted by r1/inc3
    "launch op4@r1 confirm",  # the executor starts (billed once)
    "drop m4",  # the Dispatch reply is lost: DISPATCH_UNKNOWN after the deadline
    "advance 6.0",
    "drop m5",  # the status call is lost too
    "restart r1 restored:0",  # r1 comes back on the empty copy
]


def test_a_restored_copy_keeping_its_store_id_is_caught() -> None:
    """§6 witness (issue 8.1): a copy restored under the original store_id (as a backup
    copied over the file on the same inode is) must never license a replay. Trusting the
    store's silence bills the turn twice; the witness ends it INCARNATION_CHANGED."""
    broken = SimConfig(check_proofs=False)
    result = replay(
        RESTORED_COPY_SETUP, RESTORED_COPY_STEPS, broken, policy=trust_the_store_blindly
    )
    assert result.violation is not None and result.violation.startswith("[1 at most once]")
    correct = replay(RESTORED_COPY_SETUP, RESTORED_COPY_STEPS, SimConfig())
    assert correct.violation is None, correct.report()
    assert correct.coverage["reason:INCARNATION_CHANGED"] == 1


def test_breaking_the_witness_bills_twice_or_lies_over_random_restores() -> None:
    """Broken on purpose, the witness is caught by the ledger within the CI budget (restores
    keep their store_id); the real core survives the same seeds."""
    # Restores are the point here, not scheduling, the runner set or executors: every
    # schedule routes at random among a fixed set, and no turn names an executor a
    # runner may refuse (R14).
    config = SimConfig(
        steps=70,
        trace=False,
        check_proofs=False,
        restored_share=0.35,
        scheduled_share=0.0,
        membership_share=0.0,
        executor_rules=False,
    )
    result = run_budget(SEEDS, config, trust_the_store_blindly, stop_on_violation=True)
    assert result.violations, f"trust_the_store_blindly survived {result.schedules} schedules"
    seed, violation = result.violations[0]
    assert violation.startswith(("[1 at most once]", "[3 execution]", "[3 true status]")), violation
    correct = run_budget(range(seed + 1), config)
    assert not correct.violations, correct.violations[:1]
    print(f"trust_the_store_blindly: seed {seed}: {violation}")


@pytest.mark.parametrize(
    ("factory", "rule"),
    [(ignores_slots, "[9 capacity]"), (first_come_first_served, "[9 fairness]")],
    ids=["capacity", "fairness"],
)
def test_breaking_one_scheduler_rule_is_caught(factory: SchedulerFactory, rule: str) -> None:
    """Issue 9: the simulation runs the real scheduler; removing its capacity rule or its
    fairness rule (one at a time) breaks the matching check within the CI budget, while
    the real scheduler passes the same seeds (test_budget)."""
    config = SimConfig(steps=70, trace=False, scheduler_factory=factory)
    result = run_budget(SEEDS, config, stop_on_violation=True)
    assert result.violations, f"{factory.__name__} survived {result.schedules} schedules"
    seed, violation = result.violations[0]
    assert violation.startswith(rule), violation
    print(f"{factory.__name__}: caught at seed {seed}: {violation}")


@pytest.mark.rule("M3")
def test_a_removal_that_ignores_bound_turns_is_caught() -> None:
    """§11 M3: removing a drained runner while turns are still bound to it (the
    journal's check skipped) ends those turns RUNNER_REMOVED; the checker names it."""
    config = SimConfig(steps=70, trace=False, removal_checks_turns=False)
    result = run_budget(SEEDS, config, None, stop_on_violation=True)
    assert result.violations, f"survived {result.schedules} schedules"
    seed, violation = result.violations[0]
    assert violation.startswith("[§11 M6 removal]"), violation
    print(f"removal without the turn check: caught at seed {seed}: {violation}")
