"""Issue 11: calls open at once are limited per principal, and streams for the whole coordinator.

Not a PROTOCOL rule (the limits refuse before anything is read or written, so no
rule of the journal is touched); README "Security", Limits, is their contract.

The bookkeeping alone (coordinator_svc/api/call_limits.py), then a live
coordinator with small limits and a real runner: streams over a limit are
refused RESOURCE_EXHAUSTED / CONCURRENCY_LIMIT with RetryInfo, another
principal is unaffected until the server-wide cap, a closed stream gives its
place back, and a normal turn still succeeds.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator_svc.api.call_limits import CallLimits
from coordinator_svc.api.errors import ApiError
from coordinator_svc.app import RunningCoordinator
from coordinator_svc.config import CallLimitSettings
from tests.coordinator.api.harness import submit_request
from tests.support import runner_access
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2 as C
from turnwire.coordinator.v1 import coordinator_pb2_grpc
from turnwire.errors import error_info
from turnwire.testing.stack import Stack


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def test_a_limit_refuses_the_call_over_it_typed_and_gives_the_place_back() -> None:
    limits = CallLimits(CallLimitSettings(calls_per_principal=2, retry_after_seconds=0.5))
    with limits.principal_call("alice"), limits.principal_call("alice"):
        with pytest.raises(ApiError) as refused, limits.principal_call("alice"):
            pass
        with limits.principal_call("bob"):  # another principal has its own count
            assert limits.open_for("bob") == (1, 0)
    error = refused.value
    assert error.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.metadata == {"limit": "calls_per_principal", "max": "2"}
    assert error.retry_after == 0.5
    assert limits.open_for("alice") == (0, 0) and limits.refused["calls_per_principal"] == 1
    with pytest.raises(RuntimeError), limits.principal_call("alice"):
        raise RuntimeError("a failing call still gives its place back")
    assert limits.open_for("alice") == (0, 0)


def test_the_server_wide_stream_cap_counts_every_principal() -> None:
    limits = CallLimits(CallLimitSettings(streams_total=2))
    with (
        limits.stream_slot(),
        limits.stream_slot(),
        pytest.raises(ApiError) as refused,
        limits.stream_slot(),
    ):
        pass
    assert refused.value.metadata == {"limit": "streams_total", "max": "2"}
    assert limits.streams_open == 0


def test_zero_or_negative_limits_are_refused_at_configuration() -> None:
    with pytest.raises(ValueError, match="streams_total must be at least 1"):
        CallLimitSettings(streams_total=0)


async def _open_watch(stub: Any, token: str, operation_id: str) -> Any:
    """A WatchOperation stream that has delivered its first message (so it is open)."""
    call = stub.WatchOperation(
        C.WatchOperationRequest(operation_id=operation_id), metadata=bearer(token)
    )
    await asyncio.wait_for(call.read(), 10)
    return call


async def _refused_watch(stub: Any, token: str, operation_id: str) -> Any:
    call = stub.WatchOperation(
        C.WatchOperationRequest(operation_id=operation_id), metadata=bearer(token)
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await asyncio.wait_for(call.read(), 10)
    typed = error_info(caught.value)
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert typed is not None and typed.reason == "CONCURRENCY_LIMIT"
    assert typed.retry_after == 1.0
    return typed


@asynccontextmanager
async def _live(tmp_path: Path, limits: CallLimitSettings | None = None) -> AsyncIterator[Live]:
    """A real runner (the sleep executor) and a coordinator routing to it, with tokens for
    alice and bob and a channel to the coordinator; everything stopped afterwards."""
    async with Stack(tmp_path, secret=runner_access.SECRET) as stack:
        await stack.start_runner(executor="sleep", drain_seconds=0.5)
        tokens = {name: stack.add_token(name) for name in ("alice", "bob")}
        coordinator = await stack.start_coordinator(call_limits=limits or CallLimitSettings())
        async with grpc.aio.insecure_channel(coordinator.address) as channel:
            yield Live(coordinator, coordinator_pb2_grpc.TurnServiceStub(channel), tokens)


@dataclass
class Live:
    coordinator: RunningCoordinator
    stub: Any
    tokens: dict[str, str]

    async def slow_turn(self, principal: str) -> str:
        """A turn of ``principal``'s that runs for a minute: its watches stay open."""
        slow = submit_request("slow", model=_model(sleep_ms=60_000))
        reply = await self.stub.SubmitTurn(slow, metadata=bearer(self.tokens[principal]))
        operation_id: str = reply.operation.operation_id
        return operation_id

    async def quick_turn(self, principal: str) -> Any:
        """A turn run to its end with SubmitAndWatch; its terminal operation."""
        quick = submit_request("quick", model=_model(sleep_ms=0))
        done = await _drain(
            self.stub.SubmitAndWatch(
                C.SubmitAndWatchRequest(submit=quick, terminal_only=True),
                metadata=bearer(self.tokens[principal]),
            )
        )
        return done[-1].operation


def test_live_stream_limits_per_principal_and_server_wide(tmp_path: Path) -> None:
    """alice's 4th watch is refused (streams_per_principal 3) while bob still opens his;
    the 6th stream on the server is refused (streams_total 5) whoever asks; once alice
    closes one she may open one again; a normal turn then still succeeds."""

    async def scenario() -> None:
        limits = CallLimitSettings(streams_per_principal=3, streams_total=5)
        async with _live(tmp_path, limits) as live:
            alice, bob = live.tokens["alice"], live.tokens["bob"]
            mine, theirs = await live.slow_turn("alice"), await live.slow_turn("bob")
            alices = [await _open_watch(live.stub, alice, mine) for _ in range(3)]
            typed = await _refused_watch(live.stub, alice, mine)
            assert typed.metadata == {"limit": "streams_per_principal", "max": "3"}
            bobs = [await _open_watch(live.stub, bob, theirs) for _ in range(2)]
            typed = await _refused_watch(live.stub, bob, theirs)
            assert typed.metadata == {"limit": "streams_total", "max": "5"}
            alices.pop().cancel()
            await _eventually_opens(live.stub, alice, mine)
            done = await live.quick_turn("bob")
            for call in (*alices, *bobs):
                call.cancel()
        assert done.state == C.OPERATION_STATE_SUCCEEDED

    asyncio.run(scenario())


async def _end_of(call: Any) -> grpc.StatusCode:
    """How a stream ends, after whatever events it still delivers (bounded)."""
    for _ in range(50):
        try:
            await asyncio.wait_for(call.read(), 10)
        except grpc.aio.AioRpcError as error:
            code: grpc.StatusCode = error.code()
            return code
    raise AssertionError("the stream never ended")


async def _drain(stream: Any) -> list[Any]:
    return [message async for message in stream]


def _model(*, sleep_ms: int) -> turn_pb2.ModelRef:
    return turn_pb2.ModelRef(
        provider="builtin", name="sleep", parameters={"sleep_ms": str(sleep_ms)}
    )


async def _eventually_opens(stub: Any, token: str, operation_id: str) -> None:
    """A cancelled stream's place comes back once the server has seen the cancel."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            call = await _open_watch(stub, token, operation_id)
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.05)
            continue
        call.cancel()
        return
    raise AssertionError("a closed stream never gave its place back")


@pytest.mark.slow
def test_a_burst_of_3000_streams_is_refused_typed_and_another_principal_is_served(
    tmp_path: Path,
) -> None:
    """The issue's burst: 3,000 WatchOperation streams from one principal at once on one
    connection. 32 open (the default per-principal limit); every other one is
    RESOURCE_EXHAUSTED / CONCURRENCY_LIMIT, none a bare CANCELLED (gRPC's own queue of
    calls waiting for the servicer was 1,000 by default); another principal's turn then
    succeeds."""

    async def first_reply(call: Any) -> str:
        try:
            await asyncio.wait_for(call.read(), 30)
        except grpc.aio.AioRpcError as error:
            typed = error_info(error)
            return f"{error.code().name}/{typed.reason if typed else error.details()}"
        return "open"

    async def scenario() -> None:
        async with _live(tmp_path) as live:
            request = C.WatchOperationRequest(operation_id=await live.slow_turn("alice"))
            alice = bearer(live.tokens["alice"])
            calls = [live.stub.WatchOperation(request, metadata=alice) for _ in range(3000)]
            outcomes = await asyncio.gather(*(first_reply(call) for call in calls))
            done = await live.quick_turn("bob")
            for call in calls:
                call.cancel()
        assert collections.Counter(outcomes) == {
            "open": 32,
            "RESOURCE_EXHAUSTED/CONCURRENCY_LIMIT": 2968,
        }
        assert done.state == C.OPERATION_STATE_SUCCEEDED

    asyncio.run(scenario())


@pytest.mark.parametrize("clients_cancel_first", [True, False])
def test_stopping_with_open_streams_logs_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, clients_cancel_first: bool
) -> None:
    """Open watches when the coordinator stops: clients that stay get UNAVAILABLE
    SHUTTING_DOWN; clients that cancelled just before get nothing; either way nothing is
    logged at ERROR (sending a status to a call that already ended is not an error)."""

    async def scenario() -> None:
        async with _live(tmp_path) as live:
            mine = await live.slow_turn("alice")
            alice = live.tokens["alice"]
            calls = [await _open_watch(live.stub, alice, mine) for _ in range(20)]
            if clients_cancel_first:
                for call in calls:
                    call.cancel()
            await live.coordinator.stop()
            if not clients_cancel_first:
                for call in calls:
                    assert await _end_of(call) is grpc.StatusCode.UNAVAILABLE

    with caplog.at_level(logging.ERROR):
        asyncio.run(scenario())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
