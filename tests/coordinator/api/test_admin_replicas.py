"""A drain reaches every replica on a shared PostgreSQL journal (PROTOCOL.md §10 V8).

Two coordinator replicas on one real PostgreSQL journal, two real echo
runners. The drain is asked of replica A only; replica B learns it from the
journal (its poll, ``api/runner_set.py``) and routes every new turn to r2.
Without the drain B would pick r1 first (least loaded, ties by name).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from coordinator_svc.api.runner_set import RUNNER_SET_POLL_SECONDS
from tests.coordinator.api.admin_rig import STEP, deployment
from tests.coordinator.api.harness import submit_request
from turnwire.coordinator.v1 import admin_pb2, admin_pb2_grpc, coordinator_pb2, coordinator_pb2_grpc

pytestmark = pytest.mark.postgres


def test_a_drain_asked_of_one_replica_is_honoured_by_the_other(
    tmp_path: Path, postgres_url: str
) -> None:
    async def scenario() -> None:
        async with deployment(tmp_path, runners=("r1", "r2"), journal_url=postgres_url) as rig:
            # Two replicas on one journal; the stack stops both, whatever happens.
            a, b = [
                await rig.stack.start_coordinator(rig.config(replica_id=name), name=name)
                for name in ("replica-a", "replica-b")
            ]
            try:
                async with (
                    grpc.aio.insecure_channel(a.address) as to_a,
                    grpc.aio.insecure_channel(b.address) as to_b,
                ):
                    drained = await admin_pb2_grpc.AdminServiceStub(to_a).DrainRunner(
                        admin_pb2.DrainRunnerRequest(runner="r1", reason="maintenance"),
                        metadata=rig.admin_md,
                        timeout=STEP,
                    )
                    assert drained.runner.drained
                    for _ in range(int(4 * RUNNER_SET_POLL_SECONDS / 0.05)):  # bounded: B's poll
                        if "r1" in b.dispatcher.drained:
                            break
                        await asyncio.sleep(0.05)
                    assert "r1" in b.dispatcher.drained
                    turns = coordinator_pb2_grpc.TurnServiceStub(to_b)
                    ids = []
                    for i in range(3):
                        reply = await turns.SubmitTurn(
                            submit_request(f"via-b-{i}"), metadata=rig.tenant, timeout=STEP
                        )
                        ids.append(reply.operation.operation_id)
                    runners = set()
                    for op_id in ids:
                        for _ in range(300):  # bounded: 15 s
                            op = (
                                await turns.GetOperation(
                                    coordinator_pb2.GetOperationRequest(operation_id=op_id),
                                    metadata=rig.tenant,
                                    timeout=STEP,
                                )
                            ).operation
                            if op.finished_at.seconds:
                                break
                            await asyncio.sleep(0.05)
                        assert op.state == coordinator_pb2.OPERATION_STATE_SUCCEEDED, op
                        runners.add(op.runner)
                    assert runners == {"r2"}
            finally:
                await b.stop(grace=0.5)
                await a.stop(grace=0.5)

    asyncio.run(scenario())
