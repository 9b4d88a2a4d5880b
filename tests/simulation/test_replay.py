"""Scripted schedules: labels replay a generated run exactly; shrinking keeps a failure."""

from __future__ import annotations

from tests.simulation.broken_policies import timeout_is_refusal
from tests.simulation.shrink import same_failure, shrink
from tests.simulation.simulator import SimConfig, replay, run_seed


def test_a_label_script_replays_the_generated_schedule() -> None:
    """Every random sub-choice is in the step labels, so the labels alone rebuild the run."""
    for seed in (3, 41, 977):
        generated = run_seed(seed, SimConfig(steps=70))
        scripted = replay(generated.setup, generated.labels, SimConfig(steps=70))
        assert scripted.trace == generated.trace
        assert scripted.violation == generated.violation


def test_shrinking_keeps_the_failure_and_drops_steps() -> None:
    """The shrinker returns a shorter schedule that still breaks the same invariant."""
    config = SimConfig(steps=70)
    failing = next(
        run for seed in range(200) if (run := run_seed(seed, config, timeout_is_refusal)).violation
    )
    assert failing.violation is not None
    labels, final = shrink(
        failing.setup, failing.labels, failing.violation, config, timeout_is_refusal
    )
    assert len(labels) < len(failing.labels)
    assert same_failure(final.violation, failing.violation)
