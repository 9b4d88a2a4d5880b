"""A real runner serving the streaming executors and a real coordinator, on 127.0.0.1:0.

Both are served from a background event loop (tests/support/background_loop.py):
real gRPC servers, a real SQLite journal and runner store; the test thread
calls them with the SDK, the CLI or a raw stub. ``relay_buffer_bytes`` is the
coordinator's --stream-relay-buffer-bytes (PROTOCOL.md §12 S5).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import grpc

from tests.support import runner_access
from tests.support.background_loop import BackgroundLoop
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc

TOKEN = "tok-alice-stream"
EXECUTOR = "python:tests.streaming.emitters:count"
METADATA = (("authorization", f"Bearer {TOKEN}"),)


class StreamStack(BackgroundLoop):
    def __init__(self, directory: Path, *, relay_buffer_bytes: int | None = None) -> None:
        super().__init__()
        self._directory = directory
        self._relay_buffer_bytes = relay_buffer_bytes
        self._runner: Any = None
        self._coordinator: Any = None
        self._config: Any = None
        self.address = ""

    async def _start(self) -> None:
        from coordinator_svc.app import start_coordinator
        from coordinator_svc.config import (
            DEFAULT_RELAY_BUFFER_BYTES,
            CoordinatorConfig,
            RunnerEndpoint,
        )
        from coordinator_svc.storage.schema import migrate
        from runner_svc.app import RunnerConfig, start_runner

        self._runner = await start_runner(
            RunnerConfig(
                store_path=self._directory / "runner.db",
                access=runner_access.ACCESS,
                executor=EXECUTOR,
            )
        )
        tokens = self._directory / "tokens"
        tokens.write_text(f"alice {hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
        tokens.chmod(0o600)
        journal_url = f"sqlite:///{self._directory / 'journal.db'}"
        migrate(journal_url)
        buffer = self._relay_buffer_bytes or DEFAULT_RELAY_BUFFER_BYTES
        self._config = CoordinatorConfig(
            listen="127.0.0.1:0",
            journal_url=journal_url,
            runners=(RunnerEndpoint(name="r1", address=self._runner.address),),
            tokens_file=str(tokens),
            runner_credentials=runner_access.CREDENTIALS,
            stream_relay_buffer_bytes=buffer,
        )
        self._coordinator = await start_coordinator(self._config)
        self.address = self._coordinator.address

    def restart_coordinator(self) -> None:
        """Stop the coordinator (its relay buffers go with it, S4) and start it again on
        the same address and journal; the runner keeps running."""
        from dataclasses import replace

        from coordinator_svc.app import start_coordinator

        async def restart() -> None:
            await self._coordinator.stop()
            self._coordinator = await start_coordinator(replace(self._config, listen=self.address))

        self._run(restart())

    async def _stop(self) -> None:
        if self._coordinator is not None:
            await self._coordinator.stop()
        if self._runner is not None:
            await self._runner.stop(drain=False)

    def upstreams(self) -> int:
        """Upstreams the coordinator's relay started (S5: one per operation)."""
        return int(self._coordinator.servicer.relay.upstreams)

    def stub(self) -> tuple[grpc.Channel, Any]:
        channel = grpc.insecure_channel(self.address)
        return channel, coordinator_pb2_grpc.TurnServiceStub(channel)


def submit_request(key: str, **parameters: str) -> coordinator_pb2.SubmitTurnRequest:
    """A writable turn for the ``count`` executor with these model parameters."""
    return coordinator_pb2.SubmitTurnRequest(
        idempotency_key=key,
        turn=coordinator_pb2.Turn(
            model=turn_pb2.ModelRef(provider="test", name="count", parameters=parameters),
            input_items=[turn_pb2.InputItem(item_id="i1", role="user", content=b"go")],
            kind=turn_pb2.TURN_KIND_WRITABLE,
        ),
    )
