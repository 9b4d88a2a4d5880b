"""Hostile values at the runner's edge get typed answers and never leak a slot.

A uint64 >= 2^63 has no stored form (the dedupe table keeps signed 64-bit
integers); undecodable bytes never reach a handler; an unexpected exception is
a bare INTERNAL without internals. All over a real grpc.aio server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from runner_svc.executors import load_executor
from runner_svc.service import DispatchCall, RunnerService, ServiceSettings
from runner_svc.storage.async_store import AsyncRunnerStore
from runner_svc.storage.sqlite_store import SqliteRunnerStore
from runner_svc.transport import edge
from runner_svc.transport.servicer import SERVICE_NAME, RunnerServicer
from tests.runner.live import Live, dispatch_request, envelope, live_runner
from turnwire.errors import error_info
from turnwire.ids import new_incarnation_id, sha256_hex
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.serving import start_server

pytestmark = pytest.mark.timeout(60)

R = runner_pb2
TOO_BIG = (2**63, 2**64 - 1)


def stamp_now() -> int:
    return int(time.time() * 1_000_000)


def run(tmp_path: Path, scenario: Callable[[Live], Awaitable[None]], **config: Any) -> None:
    async def main() -> None:
        async with live_runner(tmp_path / "runner.db", **config) as live:
            await scenario(live)

    asyncio.run(main())


async def in_use(live: Live) -> dict[int, int]:
    info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
    return {pool.kind: pool.in_use for pool in info.pools}


async def typed_refusal(call: Awaitable[object]) -> Any:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    typed = error_info(caught.value)
    assert typed is not None, (caught.value.code(), caught.value.details())
    return typed


def hostile_requests(live: Live, value: int) -> list[tuple[str, Callable[[], Awaitable[object]]]]:
    """Every uint64 field of every RunnerService request, set to ``value``."""
    op = "op_hostile"
    body = envelope(op)

    def dispatch(**fields: int) -> Callable[[], Awaitable[object]]:
        request = dispatch_request(op, body, live.incarnation)
        request.dispatch_stamp = stamp_now()
        for name, number in fields.items():
            setattr(request, name, number)
        return lambda: live.stub.Dispatch(request)

    async def watch_first() -> object:
        call = live.stub.WatchOperations(R.WatchOperationsRequest(after_sequence=value))
        try:
            return await call.read()
        finally:
            call.cancel()

    inc = live.incarnation
    return [
        ("fencing_token", dispatch(fencing_token=value)),
        ("dispatch_stamp", dispatch(dispatch_stamp=value)),
        (
            "fencing_token",
            lambda: live.stub.Cancel(
                R.CancelRequest(operation_id=op, expected_incarnation_id=inc, fencing_token=value)
            ),
        ),
        (
            "fencing_token",
            lambda: live.stub.Release(
                R.ReleaseRequest(operation_id=op, expected_incarnation_id=inc, fencing_token=value)
            ),
        ),
        ("after_sequence", watch_first),
    ]


@pytest.mark.parametrize("value", TOO_BIG)
def test_uint64_at_or_above_2_63_is_argument_invalid_and_leaks_no_slot(
    tmp_path: Path, value: int
) -> None:
    """Issue 8.3: every uint64 field >= 2^63 is INVALID_ARGUMENT / ARGUMENT_INVALID naming
    the field and the incarnation; afterwards every slot is free and admission still works."""

    async def scenario(live: Live) -> None:
        for _ in range(3):  # more than the writable pool: a leak would fill it
            for field, call in hostile_requests(live, value):
                typed = await typed_refusal(call())
                assert typed.code == grpc.StatusCode.INVALID_ARGUMENT, (field, typed)
                assert typed.reason == "ARGUMENT_INVALID", (field, typed)
                assert typed.metadata["field"] == field
                assert typed.metadata["incarnation_id"] == live.incarnation
        assert set((await in_use(live)).values()) == {0}
        reply = await live.stub.Dispatch(_valid_dispatch(live, "op_after"))
        assert not reply.duplicate
        await live.wait_settled("op_after")

    run(tmp_path, scenario, writable_slots=2)


def _valid_dispatch(live: Live, op: str, token: int = 1) -> runner_pb2.DispatchRequest:
    request = dispatch_request(op, envelope(op), live.incarnation, token=token)
    request.dispatch_stamp = stamp_now()
    return request


def test_largest_storable_fencing_token_is_admitted(tmp_path: Path) -> None:
    """2^63-1 is a valid fencing token: admitted, settled, the slot given back."""

    async def scenario(live: Live) -> None:
        reply = await live.stub.Dispatch(_valid_dispatch(live, "op_max", token=2**63 - 1))
        assert reply.operation.fencing_token == 2**63 - 1
        await live.wait_settled("op_max")
        assert set((await in_use(live)).values()) == {0}

    run(tmp_path, scenario)


def test_admission_frees_its_reservation_on_an_unexpected_exception(tmp_path: Path) -> None:
    """Issue 8.3: the slot reserved for an admission is freed on ANY exception of the
    write, not only on a typed refusal (here: a token the store cannot hold, sent past
    the transport straight to the service)."""

    async def scenario(live: Live) -> None:
        service = live.runner.service
        op = "op_overflow"
        body = envelope(op)
        call = DispatchCall(
            operation_id=op,
            envelope=body,
            envelope_digest=sha256_hex(body),
            expected_incarnation_id=live.incarnation,
            fencing_token=2**63,
            attempt=1,
            dispatch_stamp=stamp_now(),
        )
        for _ in range(3):  # more than the writable pool
            with pytest.raises(Exception):  # noqa: B017 - whatever the store raises
                await service.dispatch(call)
        assert {p.in_use for p in service.info().pools} == {0}
        assert not (await live.stub.Dispatch(_valid_dispatch(live, "op_next"))).duplicate
        await live.wait_settled("op_next")

    run(tmp_path, scenario, writable_slots=2)


_METHODS = R.DESCRIPTOR.services_by_name["RunnerService"].methods_by_name


def _undecodable_cases() -> list[tuple[str, str, bytes]]:
    """(method, label, raw): corrupt bytes for every method, and invalid UTF-8 in the
    first string field of every request that has one."""
    cases = []
    for name in sorted(_METHODS):
        cases.append((name, "corrupt", b"\xff\xff\xff\xff"))
        fields = _METHODS[name].input_type.fields
        strings = [f for f in fields if f.type == f.TYPE_STRING]
        for label, bad in (("bad-utf8", b"op_\xc3\x28"), ("surrogate", b"op_\xed\xa0\x80")):
            if strings:
                tag = bytes([(strings[0].number << 3) | 2])
                cases.append((name, label, tag + bytes([len(bad)]) + bad))
    return cases


@pytest.mark.parametrize(("method", "label", "raw"), _undecodable_cases())
def test_undecodable_request_is_request_malformed(
    tmp_path: Path, method: str, label: str, raw: bytes
) -> None:
    """Issue 8.6: bytes that do not decode (or hold invalid UTF-8 in a string field) are
    INVALID_ARGUMENT / REQUEST_MALFORMED with the incarnation; no exception text."""
    path = f"/{SERVICE_NAME}/{method}"

    async def scenario(live: Live) -> None:
        if _METHODS[method].server_streaming:
            call: Any = live.channel.unary_stream(path)(raw)
            pending = call.read()
        else:
            pending = live.channel.unary_unary(path)(raw)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await pending
        details = caught.value.details() or ""
        assert "<class" not in details and "DecodeError" not in details, details
        typed = error_info(caught.value)
        assert typed is not None, (caught.value.code(), details)
        assert (typed.code, typed.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_MALFORMED")
        assert typed.metadata["incarnation_id"] == live.incarnation

    run(tmp_path, scenario)


class _Exploding(RunnerServicer):
    async def GetRunnerInfo(self, request: Any, context: Any) -> Any:
        raise RuntimeError("secret internal detail /var/lib/store.db")

    async def WatchOperations(self, request: Any, context: Any) -> Any:
        yield R.WatchOperationsResponse(incarnation_id=self._incarnation)
        raise KeyError("secret internal detail")


def test_unexpected_exception_is_bare_internal(tmp_path: Path) -> None:
    """Issue 8.6: a handler bug is INTERNAL "internal error": no class name, no text."""

    async def main() -> None:
        store = SqliteRunnerStore.open(tmp_path / "r.db", new_incarnation_id())
        service = RunnerService(AsyncRunnerStore(store), load_executor("echo"), ServiceSettings())
        servicer = _Exploding(service)
        server = await start_server(
            "127.0.0.1:0", lambda s: edge.add_to_server(servicer, s), [SERVICE_NAME]
        )
        try:
            async with grpc.aio.insecure_channel(server.address) as channel:
                stub = runner_pb2_grpc.RunnerServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.GetRunnerInfo(R.GetRunnerInfoRequest())
                assert caught.value.code() == grpc.StatusCode.INTERNAL
                assert caught.value.details() == "internal error"
                call = stub.WatchOperations(R.WatchOperationsRequest())
                assert (await call.read()).incarnation_id == service.incarnation_id
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call.read()
                assert caught.value.code() == grpc.StatusCode.INTERNAL
                assert caught.value.details() == "internal error"
        finally:
            await server.stop(None)
            await service.close()

    asyncio.run(main())


def test_refusal_echoing_a_huge_id_still_arrives_typed(tmp_path: Path) -> None:
    """A refusal that names a 70 kB operation id must not outgrow gRPC's header limit
    (it arrived as an untyped RESOURCE_EXHAUSTED): the message is cut, the over-long
    metadata value left out, the incarnation kept."""

    async def scenario(live: Live) -> None:
        for huge in ("y" * 70_000, "\U0001f600" * 20_000):  # ASCII, and 4 UTF-8 bytes a char
            await refusals_arrive_typed(live, huge)

    async def refusals_arrive_typed(live: Live, huge: str) -> None:
        calls = [
            live.stub.GetOperationStatus(R.GetOperationStatusRequest(operation_id=huge)),
            live.stub.Dispatch(dispatch_request(huge, envelope(huge), live.incarnation)),
            live.stub.Cancel(
                R.CancelRequest(operation_id=huge, expected_incarnation_id=live.incarnation)
            ),
        ]
        for call in calls:
            typed = await typed_refusal(call)
            assert typed.code == grpc.StatusCode.INVALID_ARGUMENT
            assert typed.metadata["incarnation_id"] == live.incarnation
            assert "operation_id" not in typed.metadata
            assert len(typed.message.encode()) <= 1024

    run(tmp_path, scenario)
