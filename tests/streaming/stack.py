"""A real runner serving the streaming executors and a real coordinator, on 127.0.0.1:0.

turnwire.testing's Stack, served by a StackThread (its own event loop): real
gRPC servers, a real SQLite journal and runner store; the test thread
calls them with the SDK, the CLI or a raw stub. ``relay_buffer_bytes`` is the
coordinator's --stream-relay-buffer-bytes (PROTOCOL.md §12 S5).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from coordinator_svc.config import DEFAULT_RELAY_BUFFER_BYTES
from tests.support import runner_access
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from turnwire.testing.stack import Stack, StackThread

TOKEN = "tok-alice-stream"
EXECUTOR = "python:tests.streaming.emitters:count"
METADATA = (("authorization", f"Bearer {TOKEN}"),)


class StreamStack(StackThread):
    def __init__(self, directory: Path, *, relay_buffer_bytes: int | None = None) -> None:
        super().__init__(Stack(directory, secret=runner_access.SECRET))
        self._relay_buffer_bytes = relay_buffer_bytes or DEFAULT_RELAY_BUFFER_BYTES
        self.address = ""

    async def _start(self) -> None:
        await self.stack.start_runner("r1", executor=EXECUTOR)
        self.stack.add_token("alice", TOKEN)
        coordinator = await self.stack.start_coordinator(
            stream_relay_buffer_bytes=self._relay_buffer_bytes
        )
        self.address = coordinator.address

    def restart_coordinator(self) -> None:
        """Stop the coordinator (its relay buffers go with it, S4) and start it again on
        the same address and journal; the runner keeps running."""
        self.call(self.stack.restart_coordinator())

    def upstreams(self) -> int:
        """Upstreams the coordinator's relay started (S5: one per operation)."""
        return int(self.stack.coordinator.servicer.relay.upstreams)

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
