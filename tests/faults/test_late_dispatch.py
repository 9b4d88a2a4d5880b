"""A Dispatch that reaches its runner after the admission floor passed its stamp
(issue 27, W2a and C6c): real processes, a fault proxy holding the request back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from turnwire.client import Execution, OperationState, TurnwireClient
from turnwire.deployment import LocalDeployment
from turnwire.faults import FaultControlClient, parse_rule
from turnwire.harness import check_run
from turnwire.harness.outcomes import stale_refusals

# Longer than the floor's trail (0.25 s window + 0.25 s interval, W2a), and far
# shorter than the coordinator's 5 s dispatch timeout: under the 7 s window this
# Dispatch was admitted.
HELD_BACK_MS = 900


async def _hold_back_the_first_dispatch(control_address: str) -> None:
    async with FaultControlClient(control_address) as control:
        await control.add(parse_rule(f"delay-request method=Dispatch ms={HELD_BACK_MS} nth=1"))


@pytest.mark.rule("W2a", "C6c")
def test_a_dispatch_later_than_the_window_is_refused_stale_and_the_turn_runs_once(
    tmp_path: Path,
) -> None:
    """W2a, C6c: the first Dispatch held back 0.9 s by the proxy arrives below the
    floor: refused DISPATCH_STALE, nothing admitted; the coordinator sends the turn
    again with a fresh stamp and it runs once (SUCCEEDED, one ledger start, the
    stale attempt counted as a re-send by the oracle's figures)."""
    # The short window W2a argues for (the default stays 7 s: a burst of
    # thousands of submits delays Dispatches past 0.25 s, docs/PERFORMANCE.md).
    deployment = LocalDeployment(
        tmp_path / "deploy",
        runner_count=1,
        with_proxies=True,
        runner_args=("--admission-window", "0.25"),
    )
    deployment.start()
    try:
        asyncio.run(_hold_back_the_first_dispatch(deployment.runners[0].control_address))
        with TurnwireClient(deployment.address, token=deployment.token) as client:
            final = client.submit_and_wait(items=["late"], model="builtin/metered", timeout=60)
    finally:
        deployment.stop()
    assert (final.state, final.execution) == (OperationState.SUCCEEDED, Execution.STARTED)
    assert final.attempt_count == 2
    verdict = check_run(
        deployment.journal, [slot.store for slot in deployment.runners], deployment.ledger
    )
    assert not verdict.violations and verdict.figures.executions == 1
    (history,) = verdict.run.histories.values()
    first, second = history.attempts
    assert (first.outcome, second.outcome) == ("REFUSED", "ACCEPTED")
    assert first.detail.startswith("DISPATCH_STALE")
    assert stale_refusals(verdict.run.histories.values()) == 1
