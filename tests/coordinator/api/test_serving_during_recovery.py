"""Issue 27: a restarted coordinator answers reads while C12 recovery runs (with
10,000 turns in flight, recovery alone took about half a second before the first
answer); what changes a turn (a submit's write, a cancel) waits for recovery."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator_svc.api.auth import add_token
from coordinator_svc.app import start_coordinator
from coordinator_svc.config import CoordinatorConfig, DispatchTimings, parse_runner_spec
from coordinator_svc.core.model import OperationRecord, OpState
from coordinator_svc.storage import FakeJournal
from tests.coordinator.api.harness import bearer, submit_request
from tests.support import runner_access
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from turnwire.ids import sha256_hex
from turnwire.runner.v1 import runner_pb2
from turnwire.testing.records import submitted

STEP_TIMEOUT = 10.0


class RecoveryHeldJournal(FakeJournal):
    """The fake journal, with recovery's reads of open turns held until ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.recovering = asyncio.Event()
        self.release = asyncio.Event()

    async def in_state(self, state: OpState, limit: int) -> list[OperationRecord]:
        if state is OpState.RUNNING and not self.release.is_set():
            self.recovering.set()
            await self.release.wait()
        return await super().in_state(state, limit)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _config(tmp_path: Path, port: int) -> tuple[CoordinatorConfig, str]:
    tokens = tmp_path / "tokens"
    token = add_token(tokens, "alice")
    config = CoordinatorConfig(
        listen=f"127.0.0.1:{port}",
        journal_url="unused: a journal is passed in",
        runners=(parse_runner_spec(f"r1=127.0.0.1:{_free_port()};pool=default"),),
        tokens_file=str(tokens),
        timings=DispatchTimings(preflight_timeout=0.5, backoff_initial=0.2, idle_poll=0.2),
        runner_credentials=runner_access.CREDENTIALS,
    )
    return config, token


@pytest.mark.rule("C12")
def test_reads_are_answered_during_recovery_and_a_submit_waits_for_it(tmp_path: Path) -> None:
    """C12 still runs before anything changes a turn: the GetOperation of a stored
    turn is answered while recovery is held; a SubmitTurn sent then completes only
    once recovery is released."""
    port = _free_port()
    config, token = _config(tmp_path, port)

    async def scenario() -> None:
        journal = RecoveryHeldJournal()
        envelope = runner_pb2.TurnEnvelope(operation_id="op-0001").SerializeToString()
        stored = await submitted(journal, envelope=envelope, envelope_digest=sha256_hex(envelope))
        starting = asyncio.create_task(start_coordinator(config, journal=journal))
        running = None
        try:
            await asyncio.wait_for(journal.recovering.wait(), STEP_TIMEOUT)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub: Any = coordinator_pb2_grpc.TurnServiceStub(channel)
                read = await stub.GetOperation(
                    coordinator_pb2.GetOperationRequest(operation_id=stored.operation_id),
                    metadata=bearer(token),
                    timeout=STEP_TIMEOUT,
                    wait_for_ready=True,
                )
                assert read.operation.operation_id == stored.operation_id
                assert not starting.done()  # recovery is still held
                submit = asyncio.ensure_future(
                    stub.SubmitTurn(submit_request(), metadata=bearer(token), timeout=STEP_TIMEOUT)
                )
                await asyncio.sleep(0.3)
                assert not submit.done()  # it waits for recovery
                journal.release.set()
                running = await asyncio.wait_for(starting, STEP_TIMEOUT)
                reply = await submit
                assert reply.operation.state == coordinator_pb2.OPERATION_STATE_QUEUED
        finally:
            journal.release.set()
            if running is None and not starting.done():
                starting.cancel()
            if running is not None:
                await running.stop()

    asyncio.run(scenario())
