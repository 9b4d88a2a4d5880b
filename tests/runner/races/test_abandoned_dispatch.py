"""Regression: a Dispatch whose caller gave up while its dedupe write was queued.

Found by the SDK's live tests: the coordinator abandoned a Dispatch (deadline)
while the runner's admission write was still waiting for the store thread.
The write committed, but the cancelled handler never launched the job: the
row stayed ACCEPTED on the live incarnation forever and its slot leaked, so
the operation sat in RUNNING on the coordinator (§8 item 2).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import grpc
import pytest

from tests.runner.live import dispatch_request, envelope, live_runner
from turnwire.ledger import count_starts
from turnwire.runner.v1 import runner_pb2

R = runner_pb2


@pytest.mark.rule("R3", "R4")
def test_dispatch_abandoned_during_its_admission_write_still_runs_once(tmp_path: Path) -> None:
    """R3/R4: an admission that committed runs exactly once and frees its slot, even if
    the caller's deadline cancelled the handler while the write was in flight."""
    ledger = tmp_path / "ledger.jsonl"

    async def main() -> None:
        async with live_runner(
            tmp_path / "r.db", executor="metered", ledger_path=ledger, writable_slots=1
        ) as live:
            # Another connection holds SQLite's write lock, so the admission
            # write starts on the store thread and blocks inside it (busy
            # timeout 5 s) until the lock is released: in flight, not queued.
            holder = sqlite3.connect(tmp_path / "r.db", isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")
            try:
                body = envelope("op_abandoned", sleep_ms=50)
                request = dispatch_request("op_abandoned", body, live.incarnation)
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await live.stub.Dispatch(request, timeout=0.5)
                assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            done = await live.wait_settled("op_abandoned")
            assert done.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            info = await live.stub.GetRunnerInfo(runner_pb2.GetRunnerInfoRequest())
            assert all(pool.in_use == 0 for pool in info.pools), info

    asyncio.run(main())
    assert count_starts(ledger)["op_abandoned"] == 1
