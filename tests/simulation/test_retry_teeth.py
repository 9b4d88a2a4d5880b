"""Teeth for R15 in the simulation: the checker catches a runner that retries an
execution whose effect was not declared NONE, and one that starts the next
execution while the previous one still runs.

Every fourth simulated turn has a retry policy (tests/simulation/world.py:
turn_retry) and executors fail declaring NONE, APPLIED or nothing; the real
cores pass the CI budget (test_budget). Each breakage patches the one rule in
runner_svc.core.retries that both the job machine and the row table ask (so
defence in depth does not hide the broken machine), plus the machine's part.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from runner_svc.core import job_lifecycle, retries
from runner_svc.core.job_events import ExecutorStarted
from runner_svc.core.job_lifecycle import ArmRetryTimer, JobState, Phase, RetryTimerFired, Step
from runner_svc.core.model import ExecutionRecord, TurnFailure
from tests.simulation.budget import run_budget
from tests.simulation.simulator import SimConfig

SEEDS = range(3000)
CONFIG = SimConfig(steps=70, trace=False)


@pytest.mark.rule("R15")
def test_a_runner_that_retries_an_undeclared_or_applied_effect_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R15: retrying any failure (APPLIED, nothing declared) could bill twice."""

    def any_failure(error: TurnFailure | None) -> bool:
        return error is not None

    monkeypatch.setattr(retries, "retryable", any_failure)
    result = run_budget(SEEDS, CONFIG, stop_on_violation=True)
    assert result.violations, f"survived {result.schedules} schedules"
    seed, violation = result.violations[0]
    assert violation.startswith("[R15 effect]"), violation
    print(f"retries an effect not declared NONE: caught at seed {seed}: {violation}")


@pytest.mark.rule("R15")
def test_a_runner_that_overlaps_a_running_execution_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R15: a "hedged" retry (the next execution started after the backoff while the
    previous one still runs) runs two executions at once."""
    started, fired = job_lifecycle._executor_started, job_lifecycle._retry_timer_fired

    def hedge(state: JobState, event: ExecutorStarted) -> Step:
        after, commands = started(state, event)
        policy = after.retry
        if after.phase is not Phase.RUNNING or policy is None:
            return after, commands
        if after.execution_number >= policy.max_executions:
            return after, commands
        at = event.at + policy.initial_backoff
        return replace(after, retry_at=at, retry_reason="hedged"), (*commands, ArmRetryTimer(at))

    def fire_while_running(state: JobState, event: RetryTimerFired) -> Step:
        if state.phase is Phase.RUNNING and state.retry_at is not None:
            state = replace(state, phase=Phase.BACKOFF)
        return fired(state, event)

    def any_previous(previous: ExecutionRecord | None) -> bool:
        return previous is not None

    monkeypatch.setattr(job_lifecycle, "_executor_started", hedge)
    monkeypatch.setattr(job_lifecycle, "_retry_timer_fired", fire_while_running)
    monkeypatch.setattr(retries, "may_follow", any_previous)
    result = run_budget(SEEDS, CONFIG, stop_on_violation=True)
    assert result.violations, f"survived {result.schedules} schedules"
    seed, violation = result.violations[0]
    assert violation.startswith("[R15 overlap]"), violation
    print(f"overlaps a running execution: caught at seed {seed}: {violation}")
