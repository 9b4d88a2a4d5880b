"""Test support for the runner: envelopes, requests, and a live in-process runner.

A live runner is the real thing (turnwire.testing's Stack): real SQLite file,
real grpc.aio server on 127.0.0.1:0, a real channel. Nothing is mocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from runner_svc.app import RunningRunner
from runner_svc.executors import Executor
from runner_svc.service import ServiceSettings
from tests.support import runner_access
from turnwire.common.v1 import turn_pb2
from turnwire.ids import new_operation_id, sha256_hex, stamp_now
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.testing.stack import Stack

WRITABLE = turn_pb2.TURN_KIND_WRITABLE
READ_ONLY = turn_pb2.TURN_KIND_READ_ONLY
S = runner_pb2  # short alias for RunnerOperationState values in assertions


def envelope(
    operation_id: str,
    *,
    kind: int = WRITABLE,
    sleep_ms: int | None = None,
    fail: bool = False,
    output: str | None = None,
    deadline: float | None = None,
    budget_ms: int = 0,
    executor: str = "",
    heartbeat_ms: int | None = None,
    items: tuple[str, ...] = (),
    parameters: dict[str, str] | None = None,
) -> bytes:
    parameters = dict(parameters or {})
    if sleep_ms is not None:
        parameters["sleep_ms"] = str(sleep_ms)
    if fail:
        parameters["fail"] = "1"
    if output is not None:
        parameters["output"] = output
    message = runner_pb2.TurnEnvelope(
        operation_id=operation_id,
        model=turn_pb2.ModelRef(provider="test", name="builtin", parameters=parameters),
        kind=kind,  # type: ignore[arg-type]
        limits=turn_pb2.Limits(budget_ms=budget_ms),
        executor=executor,
        input_items=[
            turn_pb2.InputItem(item_id=f"i{n}", role="user", content_type="text/plain", content=t)
            for n, t in enumerate(text.encode() for text in items)
        ],
    )
    if heartbeat_ms is not None:
        message.limits.heartbeat_timeout.FromMilliseconds(heartbeat_ms)
    if deadline is not None:
        stamp = Timestamp()
        stamp.FromNanoseconds(int(deadline * 1e9))
        message.limits.deadline.CopyFrom(stamp)
    return message.SerializeToString(deterministic=True)


def dispatch_request(
    operation_id: str, body: bytes, incarnation_id: str, *, token: int = 1, attempt: int = 1
) -> runner_pb2.DispatchRequest:
    return runner_pb2.DispatchRequest(
        operation_id=operation_id,
        envelope=body,
        envelope_digest=sha256_hex(body),
        expected_incarnation_id=incarnation_id,
        fencing_token=token,
        attempt=attempt,
        dispatch_stamp=stamp_now(),
    )


@dataclass
class Live:
    runner: RunningRunner
    channel: grpc.aio.Channel
    stub: runner_pb2_grpc.RunnerServiceStub
    store_path: Path

    @property
    def incarnation(self) -> str:
        return self.runner.incarnation_id

    async def dispatch(
        self, operation_id: str | None = None, **knobs: object
    ) -> runner_pb2.DispatchResponse:
        op = operation_id or new_operation_id()
        token = int(knobs.pop("token", 1))  # type: ignore[call-overload]
        body = envelope(op, **knobs)  # type: ignore[arg-type]
        return await self.stub.Dispatch(dispatch_request(op, body, self.incarnation, token=token))

    async def status(self, operation_id: str) -> runner_pb2.GetOperationStatusResponse:
        return await self.stub.GetOperationStatus(
            runner_pb2.GetOperationStatusRequest(operation_id=operation_id)
        )

    async def cancel(self, operation_id: str, token: int = 1) -> runner_pb2.CancelResponse:
        return await self.stub.Cancel(
            runner_pb2.CancelRequest(
                operation_id=operation_id,
                expected_incarnation_id=self.incarnation,
                fencing_token=token,
            )
        )

    async def wait_state(
        self,
        operation_id: str,
        done: Callable[[runner_pb2.RunnerOperation], bool],
        seconds: float = 10,
    ) -> runner_pb2.RunnerOperation:
        """Poll status (bounded) until ``done`` holds; fail with the last state."""
        deadline = time.monotonic() + seconds
        last = None
        while time.monotonic() < deadline:
            reply = await self.status(operation_id)
            last = reply.operation
            if reply.present and done(reply.operation):
                return reply.operation
            await asyncio.sleep(0.02)
        raise AssertionError(f"{operation_id} never reached the expected state; last: {last}")

    async def stream(
        self, operation_id: str, after_offset: int = 0, seconds: float = 20
    ) -> list[runner_pb2.StreamOutputResponse]:
        """Every StreamOutput message from ``after_offset`` to its end (bounded)."""
        request = runner_pb2.StreamOutputRequest(
            operation_id=operation_id, after_offset=after_offset
        )
        messages = []
        async with asyncio.timeout(seconds):
            async for message in self.stub.StreamOutput(request):
                messages.append(message)
        return messages

    async def wait_settled(
        self, operation_id: str, seconds: float = 10
    ) -> runner_pb2.RunnerOperation:
        return await self.wait_state(operation_id, lambda op: op.HasField("settled_at"), seconds)


def settled(op: runner_pb2.RunnerOperation) -> bool:
    return op.HasField("settled_at")


@contextlib.asynccontextmanager
async def live_runner(
    store_path: Path,
    *,
    settings: ServiceSettings | None = None,
    executor_override: Executor | None = None,
    drain: bool = True,
    **config: object,
) -> AsyncIterator[Live]:
    """A started runner (turnwire.testing's Stack) with a channel to it; always stopped
    afterwards (drained first when ``drain``)."""
    async with Stack(store_path.parent, secret=runner_access.SECRET) as stack:
        runner = await stack.start_runner(
            store_path.stem,
            settings=settings,
            executor_override=executor_override,
            **({"store_path": store_path, "drain_seconds": 5.0} | config),
        )
        channel = runner_access.aio_channel(runner.address)
        try:
            yield Live(runner, channel, runner_pb2_grpc.RunnerServiceStub(channel), store_path)
        finally:
            await channel.close()
            await runner.stop(drain=drain)  # before the stack's own (undrained) stop
