"""The CI budget: thousands of seeded schedules against the real pure cores."""

from __future__ import annotations

import functools

from tests.simulation.budget import HARD_CASES, BudgetResult, run_budget
from tests.simulation.simulator import SimConfig, run_seed

SEEDS = range(3000)
CONFIG = SimConfig(steps=70, trace=False)


@functools.cache
def budget() -> BudgetResult:
    result = run_budget(SEEDS, CONFIG)
    print(f"\nsimulation budget: {result.figures()}")
    return result


def test_every_invariant_holds_across_the_ci_budget() -> None:
    """§8.1-8.6: no seed in the CI budget breaks an invariant."""
    result = budget()
    assert result.schedules == len(SEEDS)
    if result.violations:
        seed = result.violations[0][0]
        detail = run_seed(seed, SimConfig(steps=CONFIG.steps)).report()
        raise AssertionError(f"{len(result.violations)} violations, first: seed {seed}\n{detail}")


def test_the_budget_exercises_the_hard_cases() -> None:
    """Anti-vacuity: replays, reconcile, changed incarnations, tombstones, restarts all happened."""
    coverage = budget().coverage
    counts = {name: coverage[key] for name, key in HARD_CASES.items()}
    print("\n".join(f"  {name}: {count}" for name, count in counts.items()))
    missing = [name for name, count in counts.items() if count == 0]
    assert not missing, f"the budget never exercised: {missing}"


def test_a_seed_replays_to_the_same_trace() -> None:
    """Determinism: one seed is one schedule, so any failure can be replayed from its seed."""
    first, second = run_seed(17, SimConfig(steps=70)), run_seed(17, SimConfig(steps=70))
    assert first.trace == second.trace
    assert first.labels == second.labels
    assert len(first.trace) > 70
