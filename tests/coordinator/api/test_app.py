"""The composition root in-process: real Dispatcher, real journal, real server (C1, C11)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator_svc.api.auth import add_token
from coordinator_svc.app import RunningCoordinator, start_coordinator
from coordinator_svc.config import CoordinatorConfig, DispatchTimings, parse_runner_spec
from coordinator_svc.core.model import Execution, OpState, StopReason
from coordinator_svc.ports import Journal
from tests.coordinator.api.conftest import Store
from tests.coordinator.api.harness import bearer, submit_request, typed_error
from tests.support import runner_access
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from turnwire.serving import AddressInUseError

STEP_TIMEOUT = 10.0


def _closed_port() -> int:
    """A port nothing listens on (a runner that is down: connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _config(tmp_path: Path, **fields: Any) -> tuple[CoordinatorConfig, str]:
    tokens = tmp_path / "tokens"
    token = add_token(tokens, "alice")
    values: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "journal_url": "unused: a journal is passed in",
        "runners": (parse_runner_spec(f"r1=127.0.0.1:{_closed_port()};pool=default"),),
        "tokens_file": str(tokens),
        "timings": DispatchTimings(preflight_timeout=0.5, backoff_initial=0.2, idle_poll=0.2),
        "runner_credentials": runner_access.CREDENTIALS,
    }
    values.update(fields)
    return CoordinatorConfig(**values), token


async def _health(address: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="turnwire.coordinator.v1.TurnService"),
            timeout=STEP_TIMEOUT,
        )
        return int(reply.status)


@pytest.mark.rule("C11")
def test_cancel_of_a_queued_operation_ends_cancelled_not_started(
    store: Store, tmp_path: Path
) -> None:
    """C11: cancelling a QUEUED op (runner down, never sent) -> CANCELLED, NOT_STARTED."""
    config, token = _config(tmp_path)

    async def scenario(journal: Journal) -> None:
        running = await start_coordinator(config, journal=journal)
        try:
            async with grpc.aio.insecure_channel(running.address) as channel:
                stub: Any = coordinator_pb2_grpc.TurnServiceStub(channel)
                md = bearer(token)
                op = (await stub.SubmitTurn(submit_request(), metadata=md)).operation
                assert op.state == coordinator_pb2.OPERATION_STATE_QUEUED
                reply = await stub.CancelOperation(
                    coordinator_pb2.CancelOperationRequest(operation_id=op.operation_id),
                    metadata=md,
                )
                done = reply.operation
                assert done.state == coordinator_pb2.OPERATION_STATE_CANCELLED
                assert done.execution == turn_pb2.EXECUTION_NOT_STARTED
                assert done.cancel_requested
                assert done.stop_reason == turn_pb2.STOP_REASON_CANCEL
                record = await journal.get(op.operation_id)
                assert record is not None
                assert record.state is OpState.CANCELLED
                assert record.execution is Execution.NOT_STARTED
                assert record.stop_reason is StopReason.CANCEL
                assert await journal.attempts(op.operation_id) == []
                again = await stub.CancelOperation(
                    coordinator_pb2.CancelOperationRequest(operation_id=op.operation_id),
                    metadata=md,
                )
                assert again.operation == done  # terminal: returned as it is
                watch = stub.WatchOperation(
                    coordinator_pb2.WatchOperationRequest(operation_id=op.operation_id),
                    metadata=md,
                )
                states = []
                for _ in range(10):
                    message = await asyncio.wait_for(watch.read(), STEP_TIMEOUT)
                    if message is grpc.aio.EOF:
                        break
                    states.append(message.event.to_state)
                assert states[0] == coordinator_pb2.OPERATION_STATE_QUEUED
                assert states[-1] == coordinator_pb2.OPERATION_STATE_CANCELLED
        finally:
            await running.stop()

    store.run(scenario)


def test_started_coordinator_is_healthy_and_refuses_unroutable_turns(
    store: Store, tmp_path: Path
) -> None:
    """Health SERVING while up; a pool no runner serves is NO_RUNNER_FOR_TURN (real Dispatcher)."""
    config, token = _config(tmp_path)

    async def scenario(journal: Journal) -> None:
        running: RunningCoordinator = await start_coordinator(config, journal=journal)
        try:
            assert await _health(running.address) == health_pb2.HealthCheckResponse.SERVING
            started = journal.commits  # the --runner flags recorded at start (§11 M8)
            async with grpc.aio.insecure_channel(running.address) as channel:
                stub: Any = coordinator_pb2_grpc.TurnServiceStub(channel)
                error = await typed_error(
                    stub.SubmitTurn(submit_request(pool="elsewhere"), metadata=bearer(token))
                )
                assert error.code == grpc.StatusCode.FAILED_PRECONDITION
                assert error.reason == "NO_RUNNER_FOR_TURN"
                assert journal.commits == started
        finally:
            await running.stop()
            await running.stop()  # idempotent

    store.run(scenario)


@pytest.mark.rule("C12")
def test_start_on_a_taken_port_fails_before_touching_the_journal(tmp_path: Path) -> None:
    """A second coordinator on a used port refuses to start and runs no recovery (C12)."""

    async def scenario() -> None:
        from coordinator_svc.storage import FakeJournal

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            port = holder.getsockname()[1]
            config, _ = _config(tmp_path, listen=f"127.0.0.1:{port}")
            journal = FakeJournal()
            with pytest.raises(AddressInUseError):
                await start_coordinator(config, journal=journal)
            assert journal.commits == 0

    asyncio.run(scenario())
