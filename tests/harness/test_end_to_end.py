"""The oracle after a real run: coordinator + runner (metered) + client, with lost messages.

turnwire.testing's Stack: real grpc.aio servers on 127.0.0.1:0, a real SQLite
journal and runner store, the metered ledger; the coordinator's calls to the runner go through
a fault interceptor that loses one Dispatch reply and one Dispatch request.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from coordinator_svc.config import DispatchTimings
from tests.support import runner_access
from tests.support.fault_interceptor import DROP_REQUEST, DROP_RESPONSE, Fault, FaultInterceptor
from turnwire.client import AsyncTurnwireClient, OperationState
from turnwire.harness import Status, check_run
from turnwire.harness.oracle_cli import main_check
from turnwire.testing.stack import Stack

TOKEN = "tok-oracle-e2e"
TIMINGS = DispatchTimings(
    preflight_timeout=2.0,
    dispatch_timeout=3.0,
    backoff_initial=0.02,
    backoff_max=0.2,
    reconcile_deadline=20.0,
    idle_poll=0.05,
)
WAIT_SECONDS = 20.0


async def _run(stack: Stack) -> None:
    await stack.start_runner(executor="metered", ledger_path=stack.ledger)
    stack.add_token("alice", TOKEN)
    # Dispatch #1 (first turn): the runner accepts, the reply is lost -> reconcile.
    # Dispatch #2 (second turn): the request is lost -> preflight absent -> one replay.
    faults = FaultInterceptor(
        Fault("Dispatch", DROP_RESPONSE, nth=1), Fault("Dispatch", DROP_REQUEST, nth=2)
    )
    coordinator = await stack.start_coordinator(interceptors=[faults], timings=TIMINGS)
    async with AsyncTurnwireClient(coordinator.address, TOKEN) as client:
        for output in ("first", "second"):
            submitted = await client.submit(
                items=["hello"], model="test/metered", parameters={"output": output}
            )
            done = await client.wait(submitted.operation.operation_id, WAIT_SECONDS)
            assert done.state is OperationState.SUCCEEDED
    assert all(fault.fired for fault in faults.faults)


def test_real_run_with_lost_dispatch_messages_passes_the_oracle(tmp_path: Path) -> None:
    """§8 1-6 after a real run: lost reply reconciled without resend, lost request replayed once."""
    stack = Stack(tmp_path, secret=runner_access.SECRET)

    async def run() -> None:
        async with stack:
            await _run(stack)

    asyncio.run(run())
    journal_url, store, ledger = stack.journal_url, tmp_path / "r1.db", stack.ledger

    verdict = check_run(journal_url, [store], ledger)
    assert verdict.violations == ()
    assert verdict.status is Status.PASS
    figures = verdict.figures
    assert figures.operations == 2
    assert dict(figures.by_terminal_state) == {"SUCCEEDED": 2}
    assert figures.executions == 2
    assert figures.duplicates == 0
    assert figures.reconciled_without_resend == 1
    assert figures.replays == 1
    argv = ["--journal-url", journal_url, "--runner-store", str(store), "--ledger", str(ledger)]
    assert main_check(argv) == 0
