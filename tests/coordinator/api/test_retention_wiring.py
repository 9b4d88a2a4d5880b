"""The coordinator prunes on its own schedule (issue 12, PROTOCOL.md §9 K1), end to end.

A real coordinator on a SQLite file with a one-second idempotency horizon and
a pass every 0.2 s: a finished turn's key is a replay within the horizon;
past it the operation is NOT_FOUND and the same key makes a new operation.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator_svc.api.auth import add_token
from coordinator_svc.app import start_coordinator
from coordinator_svc.config import CoordinatorConfig, DispatchTimings, parse_runner_spec
from coordinator_svc.retention_flags import JournalRetention
from coordinator_svc.storage import migrate
from tests.coordinator.api.harness import bearer, submit_request, typed_error
from tests.support import runner_access
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from turnwire.retention import PruneSchedule

STEP_TIMEOUT = 10.0


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.rule("K1")
def test_a_finished_turn_is_forgotten_after_the_horizon_and_its_key_is_new_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """§7, §9 K1: within the horizon the same key is a replay; after it the scheduled pass
    (started with the coordinator) has deleted the operation: GetOperation NOT_FOUND, and
    SubmitTurn with the same key is a new operation. The pass logs one INFO line."""
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    migrate(url)
    tokens = tmp_path / "tokens"
    token = add_token(tokens, "alice")
    config = CoordinatorConfig(
        listen="127.0.0.1:0",
        journal_url=url,
        # Down, so a turn stays QUEUED until it is cancelled (then terminal, released).
        runners=(parse_runner_spec(f"r1=127.0.0.1:{_closed_port()};pool=default"),),
        tokens_file=str(tokens),
        timings=DispatchTimings(preflight_timeout=0.5, backoff_initial=0.2, idle_poll=0.2),
        runner_credentials=runner_access.CREDENTIALS,
        retention=JournalRetention(1.0, PruneSchedule(interval_seconds=0.2)),
    )

    async def scenario() -> None:
        running = await start_coordinator(config)
        try:
            async with grpc.aio.insecure_channel(running.address) as channel:
                stub: Any = coordinator_pb2_grpc.TurnServiceStub(channel)
                md = bearer(token)
                first = (await stub.SubmitTurn(submit_request("pay-42"), metadata=md)).operation
                await stub.CancelOperation(
                    coordinator_pb2.CancelOperationRequest(operation_id=first.operation_id),
                    metadata=md,
                )
                again = await stub.SubmitTurn(submit_request("pay-42"), metadata=md)
                assert again.replayed and again.operation.operation_id == first.operation_id
                deadline = time.monotonic() + STEP_TIMEOUT
                while True:  # the horizon (1 s) passes, then a pass (every 0.2 s) runs
                    asked = stub.GetOperation(
                        coordinator_pb2.GetOperationRequest(operation_id=first.operation_id),
                        metadata=md,
                    )
                    try:
                        await asked
                    except grpc.aio.AioRpcError:
                        break
                    assert time.monotonic() < deadline, "never pruned"
                    await asyncio.sleep(0.1)
                gone = await typed_error(
                    stub.GetOperation(
                        coordinator_pb2.GetOperationRequest(operation_id=first.operation_id),
                        metadata=md,
                    )
                )
                assert gone.code == grpc.StatusCode.NOT_FOUND
                assert gone.reason == "OPERATION_NOT_FOUND"
                fresh = await stub.SubmitTurn(submit_request("pay-42"), metadata=md)
                assert not fresh.replayed
                assert fresh.operation.operation_id != first.operation_id
        finally:
            await running.stop()

    with caplog.at_level(logging.INFO, logger="coordinator_svc.retention"):
        asyncio.run(scenario())
    pruned = [r.getMessage() for r in caplog.records if "pruned" in r.getMessage()]
    # Counted as one reads it: "1 operation", "0 attempts", "1 batch" (was "1 operations").
    assert pruned and "pruned 1 operation, " in pruned[0], pruned
    assert "0 attempts in 1 batch," in pruned[0], pruned
