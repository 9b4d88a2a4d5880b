"""A turn submitted within milliseconds of a runner's SIGKILL (issue 27, the second
window): real processes, a fault proxy in front of the runner, as ``turnwire demo``
deploys them.

The coordinator learns of the death only when its watch stream through the proxy
breaks, a few milliseconds later. A first attempt sent in between without asking
first (C2a) reaches the proxy, whose upstream refuses the connection: UNAVAILABLE,
which is no proof (C7), so the turn went DISPATCH_UNKNOWN bound to the dead
incarnation and, once the runner came back as another, ended TIMED_OUT
INCARNATION_CHANGED UNKNOWN with nothing run. C2a now holds only while the runner
is known live (a watch message within ``--live-within``); after a quiet spell the
first attempt asks first (C2), the status call fails before any Dispatch, and the
turn waits QUEUED, so the cancel ends it CANCELLED, NOT_STARTED.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from turnwire.client import Execution, OperationState, TurnwireClient
from turnwire.deployment import LocalDeployment

# The runner's watch sends a heartbeat 2 s after its last message when idle;
# the coordinator's --live-within is 0.5 s: a runner quiet for 1 s is not known live.
QUIET = 1.0


@pytest.mark.rule("C2a")
def test_a_turn_submitted_just_after_a_runner_sigkill_is_cancelled_not_started(
    tmp_path: Path,
) -> None:
    """C2a, C14: runner SIGKILLed after a quiet second, a turn submitted within
    milliseconds, cancelled 4 s later, the runner started again: CANCELLED,
    NOT_STARTED, no attempt written, nothing in the ledger (before: C2a sent the
    Dispatch, UNAVAILABLE through the proxy, TIMED_OUT INCARNATION_CHANGED UNKNOWN)."""
    deployment = LocalDeployment(tmp_path / "deploy", runner_count=1, with_proxies=True)
    deployment.start()
    try:
        with TurnwireClient(deployment.address, token=deployment.token) as client:
            warm = client.submit_and_wait(items=["warm up"], model="builtin/metered", timeout=30)
            assert warm.state is OperationState.SUCCEEDED  # the watch knows the runner
            time.sleep(QUIET)
            slot = deployment.runners[0]
            assert slot.process.popen is not None
            killed = time.monotonic()
            os.kill(slot.process.popen.pid, signal.SIGKILL)  # not reaped yet: no wait
            submitted = client.submit(
                items=["just after the kill"], model="builtin/metered", idempotency_key="k1"
            )
            assert time.monotonic() - killed < 0.5, "the submit was not right after the kill"
            op_id = submitted.operation.operation_id
            time.sleep(4.0)
            client.cancel(op_id)
            deployment.restart_runner(slot.name, hard=True)  # a new incarnation answers
            final = client.wait(op_id, timeout=60)
        ledger = deployment.ledger.read_text()
    finally:
        deployment.stop()
    assert (final.state, final.execution) == (
        OperationState.CANCELLED,
        Execution.NOT_STARTED,
    ), final
    assert final.attempt_count == 0  # no Dispatch was ever sent
    assert op_id not in ledger
