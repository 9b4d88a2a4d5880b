"""Teeth for the executor rules the simulation checks: R14 (an unserved executor is
refused, never run) and R12 (a heartbeat stop settles TIMED_OUT, STARTED).

Every third simulated turn names an executor runner r2 does not serve, every
even one has a heartbeat timeout (tests/simulation/world.py); the real cores
pass the CI budget (test_budget); broken one rule at a time, they are caught.
"""

from __future__ import annotations

import pytest

from runner_svc.core import settlement
from runner_svc.core.model import RowState, StopReason
from tests.simulation import sim_runner
from tests.simulation.budget import run_budget
from tests.simulation.simulator import SimConfig

SEEDS = range(2000)
CONFIG = SimConfig(steps=70, trace=False)


@pytest.mark.rule("R14")
def test_a_runner_that_runs_an_executor_it_does_not_serve_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R14: a runner admitting every executor starts a turn r2 cannot serve."""
    monkeypatch.setattr(sim_runner, "served_executors", lambda name: frozenset({"default", "tool"}))
    result = run_budget(SEEDS, CONFIG, stop_on_violation=True)
    assert result.violations, f"survived {result.schedules} schedules"
    seed, violation = result.violations[0]
    assert violation.startswith("[R14 executor]"), violation
    print(f"admits any executor: caught at seed {seed}: {violation}")


@pytest.mark.rule("R12")
def test_a_heartbeat_stop_settled_as_a_cancel_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """R12: a heartbeat stop must end TIMED_OUT HEARTBEAT_TIMEOUT, not CANCELLED."""
    broken = (RowState.CANCELLED, "CANCELLED")
    monkeypatch.setitem(settlement.STOP_OUTCOMES, StopReason.HEARTBEAT, broken)
    result = run_budget(SEEDS, CONFIG, stop_on_violation=True)
    assert result.violations, f"survived {result.schedules} schedules"
    seed, violation = result.violations[0]
    assert violation.startswith("[R12 heartbeat]"), violation
    print(f"heartbeat settled as a cancel: caught at seed {seed}: {violation}")
