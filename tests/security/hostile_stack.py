"""The live stack the hostile-input suites share (tests/security/test_hostile_*.py).

A real runner (metered executor, ledger) and a real coordinator on a SQLite
journal, on 127.0.0.1, started per case on turnwire.testing's Stack;
``Stack.assert_unharmed`` checks that nothing was stored that should not be and
that a normal turn still succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator_svc.api.auth import Scope
from coordinator_svc.app import RunningCoordinator
from runner_svc.app import RunningRunner
from tests.support import runner_access
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2 as C
from turnwire.coordinator.v1 import coordinator_pb2_grpc
from turnwire.errors import TypedError, error_info
from turnwire.ledger import read_ledger
from turnwire.limits import MessageLimits
from turnwire.testing.stack import Stack as KitStack

LIMIT = 64 * 1024  # the runners' receive limit R of these stacks: small keeps sizes cheap
SERVICE = "/turnwire.coordinator.v1.TurnService"
Metadata = tuple[tuple[str, Any], ...]
S = grpc.StatusCode
SUCCEEDED = C.OPERATION_STATE_SUCCEEDED
TERMINAL = {SUCCEEDED, C.OPERATION_STATE_FAILED, C.OPERATION_STATE_CANCELLED}
TERMINAL |= {C.OPERATION_STATE_TIMED_OUT, C.OPERATION_STATE_PROTOCOL_ERROR}
TERMINAL |= {C.OPERATION_STATE_REJECTED}


def submission(key: str, *, sleep_ms: int | None = None, **fields: Any) -> C.SubmitTurnRequest:
    """A valid writable turn for the metered executor; ``fields`` override the Turn's."""
    parameters = {"output": "ok"} | ({} if sleep_ms is None else {"sleep_ms": str(sleep_ms)})
    values: dict[str, Any] = {
        "model": turn_pb2.ModelRef(provider="builtin", name="metered", parameters=parameters),
        "input_items": [turn_pb2.InputItem(item_id="i1", role="user", content=b"hello")],
        "kind": turn_pb2.TURN_KIND_WRITABLE,
    }
    return C.SubmitTurnRequest(idempotency_key=key, turn=C.Turn(**(values | fields)))


@dataclass(frozen=True)
class Snapshot:
    """Everything a hostile call might have written."""

    operations: dict[str, frozenset[str]]  # principal -> its operation ids
    executed: tuple[str, ...]  # the metered ledger: one operation id per executor start
    runner_rows: frozenset[str]  # every operation id in the runner's store


@dataclass
class Stack:
    tmp: Path
    runner: RunningRunner
    coordinator: RunningCoordinator
    tokens: dict[str, str]
    channel: grpc.aio.Channel

    @property
    def stub(self) -> Any:
        return coordinator_pb2_grpc.TurnServiceStub(self.channel)

    def auth(self, who: str = "alice") -> Metadata:
        return (("authorization", f"Bearer {self.tokens[who]}"),)

    def executed(self) -> tuple[str, ...]:
        path = self.tmp / "ledger.jsonl"
        return tuple(e.operation_id for e in read_ledger(path)) if path.exists() else ()

    async def wait_executed(self, operation_id: str) -> None:
        for _ in range(200):  # bounded: 10 s
            if operation_id in self.executed():
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{operation_id} never started")

    async def snapshot(self) -> Snapshot:
        operations = {}
        for who in ("alice", "bob"):  # every principal with operations
            listed = C.ListOperationsRequest(page_size=500)  # these stacks hold far fewer
            page = await self.stub.ListOperations(listed, metadata=self.auth(who), timeout=10)
            assert not page.next_page_token
            operations[who] = frozenset(op.operation_id for op in page.operations)
        rows = await self.runner.service.store.changes_after(0, 100_000)
        return Snapshot(operations, self.executed(), frozenset(r.operation_id for r in rows))

    async def submit_and_wait(
        self, request: C.SubmitTurnRequest, who: str = "alice", after: int = 0
    ) -> tuple[C.Operation, bool]:
        """SubmitAndWatch (terminal only) to the end: the final operation and `replayed`."""
        asked = C.SubmitAndWatchRequest(submit=request, after_sequence=after, terminal_only=True)
        call = self.stub.SubmitAndWatch(asked, metadata=self.auth(who), timeout=20)
        messages = [message async for message in call]
        assert messages and messages[-1].operation.state in TERMINAL, messages
        return messages[-1].operation, messages[-1].replayed

    async def normal_turn(self, key: str | None = None) -> str:
        """A turn that must still succeed: SUCCEEDED, STARTED, its output."""
        request = submission(key or f"normal-{uuid.uuid4().hex}")
        request.turn.item_metadata["normal"] = "1"  # never the same request as a hostile one
        operation, replayed = await self.submit_and_wait(request)
        assert not replayed and operation.state == SUCCEEDED, operation
        assert operation.execution == turn_pb2.EXECUTION_STARTED
        assert operation.result.output == b"ok"
        return operation.operation_id

    async def assert_unharmed(
        self,
        before: Snapshot,
        *,
        key: str | None = None,
        stored: Iterable[tuple[str, str]] = (),
        executed: Iterable[str] = (),
        rows: Iterable[str] = (),
    ) -> None:
        """A normal turn succeeds (with ``key`` if given: the hostile call must have left
        it free), and since ``before`` nothing was stored, started or written on the
        runner but that turn and what the protocol says the case leaves: ``stored``
        (principal, operation id), ``executed`` and runner ``rows``."""
        normal = await self.normal_turn(key)
        after = await self.snapshot()
        for who, ids in after.operations.items():
            new = {op for principal, op in stored if principal == who}
            assert ids == before.operations[who] | new | ({normal} if who == "alice" else set())
        assert sorted(after.executed) == sorted((*before.executed, *executed, normal))
        assert after.runner_rows == before.runner_rows | {normal, *rows}


@contextlib.asynccontextmanager
async def live_stack(
    tmp: Path, *, runner_limit: int = LIMIT, coordinator_limit: int = LIMIT
) -> AsyncIterator[Stack]:
    async with KitStack(tmp, secret=runner_access.SECRET) as kit:
        runner = await kit.start_runner(
            executor="metered", ledger_path=kit.ledger, max_receive_bytes=runner_limit
        )
        expired = datetime.now(UTC) - timedelta(minutes=1)
        kit.add_token("alice")
        kit.add_token("bob")
        kit.add_token("alice", scopes={Scope.READ}, label="alice-reader")
        kit.add_token("alice", expires_at=expired, label="alice-expired")
        coordinator = await kit.start_coordinator(limits=MessageLimits(coordinator_limit))
        options = (("grpc.max_send_message_length", 8 * 1024 * 1024),)
        async with grpc.aio.insecure_channel(coordinator.address, options=options) as channel:
            yield Stack(tmp, runner, coordinator, dict(kit.tokens), channel)


def run(tmp: Path, scenario: Callable[[Stack], Awaitable[None]], **limits: int) -> None:
    async def main() -> None:
        async with live_stack(tmp, **limits) as stack:
            await scenario(stack)

    asyncio.run(main())


async def refused(call: Awaitable[Any]) -> tuple[grpc.aio.AioRpcError, TypedError | None]:
    """The RpcError ``call`` must raise, and its ErrorInfo (None if untyped)."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async with asyncio.timeout(20):
            await call
    return caught.value, error_info(caught.value)


async def expect(
    call: Awaitable[Any], code: grpc.StatusCode, reason: str, metadata: dict[str, str] | None = None
) -> TypedError:
    """``call`` fails with ``code`` and an ErrorInfo ``reason`` (and exactly ``metadata``)."""
    error, info = await refused(call)
    assert info is not None, (error.code(), error.details())
    assert (error.code(), info.code, info.reason) == (code, code, reason), info
    assert metadata is None or info.metadata == metadata, info.metadata
    return info


async def drain(stream: Any) -> list[Any]:
    return [message async for message in stream]


def raw_call(stack: Stack, method: str, raw: bytes, metadata: Metadata) -> Awaitable[Any]:
    """``raw`` sent as the request bytes of ``method`` (no serializer)."""
    path = f"{SERVICE}/{method}"
    if method in ("WatchOperation", "SubmitAndWatch"):
        return drain(stack.channel.unary_stream(path)(raw, metadata=metadata))
    call: Awaitable[Any] = stack.channel.unary_unary(path)(raw, metadata=metadata)
    return call


def submits(stack: Stack, request: C.SubmitTurnRequest, md: Metadata) -> list[Awaitable[Any]]:
    """SubmitTurn and SubmitAndWatch of one submission: they must refuse alike."""
    watch = stack.stub.SubmitAndWatch(C.SubmitAndWatchRequest(submit=request), metadata=md)
    return [stack.stub.SubmitTurn(request, metadata=md), drain(watch)]


BY_ID = ("GetOperation", "CancelOperation", "WatchOperation")


def by_id(stack: Stack, rpc: str, operation_id: str, md: Metadata) -> Awaitable[Any]:
    """One of ``BY_ID`` naming ``operation_id``."""
    if rpc == "WatchOperation":
        watch = C.WatchOperationRequest(operation_id=operation_id)
        return drain(stack.stub.WatchOperation(watch, metadata=md))
    request = getattr(C, rpc.removesuffix("Operation") + "OperationRequest")
    call: Awaitable[Any] = getattr(stack.stub, rpc)(request(operation_id=operation_id), metadata=md)
    return call
