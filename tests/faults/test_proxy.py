"""The fault proxy in-process: real grpc.aio upstream, real channels, 127.0.0.1 only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.faults.cases import DISPATCH_CASES, OK, UNAVAILABLE, Case
from tests.faults.scripted_runner import (
    INCARNATION,
    ScriptedRunner,
    call_dispatch,
    dispatch_request,
    scripted_upstream,
)
from turnwire import errors
from turnwire.faults import FaultProxy, NonLoopbackAddressError, parse_rule, start_proxy
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.serving import AddressInUseError

Scenario = Callable[
    [FaultProxy, ScriptedRunner, runner_pb2_grpc.RunnerServiceStub], Awaitable[None]
]


def run_through_proxy(scenario: Scenario, runner: ScriptedRunner | None = None) -> None:
    """Upstream + proxy + a caller channel to the proxy, all real, all torn down."""

    async def main() -> None:
        async with scripted_upstream(runner) as (upstream, address):
            proxy = await start_proxy(address)
            async with proxy, grpc.aio.insecure_channel(proxy.address) as channel:
                await scenario(proxy, upstream, runner_pb2_grpc.RunnerServiceStub(channel))

    asyncio.run(main())


@pytest.mark.rule("C7")
@pytest.mark.parametrize("case", DISPATCH_CASES, ids=[c.name for c in DISPATCH_CASES])
def test_dispatch_fault_table(case: Case) -> None:
    """C7 faults: each rule gives the caller its status and the upstream its arrivals."""

    async def scenario(proxy: FaultProxy, upstream: ScriptedRunner, stub: object) -> None:
        for text in case.rules:
            proxy.add_rule(text)
        try:
            await stub.Dispatch(dispatch_request("op-1"), timeout=case.timeout)  # type: ignore[attr-defined]
            code, details = OK, ""
        except grpc.aio.AioRpcError as error:
            code, details = error.code(), error.details() or ""
        assert code == case.code
        # The proxy is done with the call, so no late forward can still arrive.
        await asyncio.wait_for(proxy.wait_idle(), 5)
        assert len(upstream.dispatched) == case.arrived
        if case.details is not None:
            assert case.details in details
        if code != OK:
            assert "grpc-status-details-bin" not in details  # injected faults are untyped (C7)

    run_through_proxy(scenario)


def test_nth_selects_only_that_call() -> None:
    """nth=2: only the second Dispatch loses its reply; all three reach the upstream."""

    async def scenario(proxy: FaultProxy, upstream: ScriptedRunner, stub: object) -> None:
        proxy.add_rule("drop-response method=Dispatch nth=2")
        codes = [await call_dispatch(stub, f"op-{i}") for i in range(3)]  # type: ignore[arg-type]
        assert codes == [OK, UNAVAILABLE, OK]
        assert upstream.dispatched == ["op-0", "op-1", "op-2"]
        [status] = proxy.rules.rules()
        assert (status.hits, status.selected) == (1, 3)

    run_through_proxy(scenario)


def test_operation_id_selects_only_that_operation() -> None:
    """op=: only calls for that operation id are dropped, whatever the method."""

    async def scenario(proxy: FaultProxy, upstream: ScriptedRunner, stub: object) -> None:
        proxy.add_rule("drop-request op=op-b")
        codes = [await call_dispatch(stub, op) for op in ("op-a", "op-b", "op-c")]  # type: ignore[arg-type]
        assert codes == [OK, UNAVAILABLE, OK]
        assert upstream.dispatched == ["op-a", "op-c"]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetOperationStatus(  # type: ignore[attr-defined]
                runner_pb2.GetOperationStatusRequest(operation_id="op-b"), timeout=5
            )
        assert caught.value.code() == UNAVAILABLE
        assert upstream.status_asked == []

    run_through_proxy(scenario)


@pytest.mark.rule("C6")
def test_typed_refusal_passes_through_intact() -> None:
    """C6: a typed ErrorInfo refusal from the upstream reaches the caller unchanged."""
    runner = ScriptedRunner(refuse={"op-refused"})

    async def scenario(proxy: FaultProxy, upstream: ScriptedRunner, stub: object) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Dispatch(dispatch_request("op-refused"), timeout=5)  # type: ignore[attr-defined]
        typed = errors.error_info(caught.value)
        assert typed is not None
        assert typed.code == grpc.StatusCode.FAILED_PRECONDITION
        assert typed.reason == "INCARNATION_MISMATCH"
        assert typed.message == "expected another incarnation"
        assert typed.metadata == {"incarnation_id": INCARNATION}

    run_through_proxy(scenario, runner)


@pytest.mark.rule("C7")
def test_drop_response_hides_a_typed_refusal() -> None:
    """C7: with drop-response the caller gets an untyped UNAVAILABLE even for a refusal."""
    runner = ScriptedRunner(refuse={"op-refused"})

    async def scenario(proxy: FaultProxy, upstream: ScriptedRunner, stub: object) -> None:
        proxy.add_rule("drop-response method=Dispatch")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Dispatch(dispatch_request("op-refused"), timeout=5)  # type: ignore[attr-defined]
        assert caught.value.code() == UNAVAILABLE
        assert errors.error_info(caught.value) is None
        assert upstream.dispatched == ["op-refused"]

    run_through_proxy(scenario, runner)


def test_metadata_and_deadline_cross_the_proxy() -> None:
    """Caller metadata and deadline reach the upstream; its initial/trailing metadata come back."""

    async def scenario(proxy: FaultProxy, upstream: ScriptedRunner, stub: object) -> None:
        call = stub.Dispatch(  # type: ignore[attr-defined]
            dispatch_request("op-1"),
            timeout=5,
            metadata=(("x-caller", "c1"), ("x-id-bin", b"\x07")),
        )
        reply = await call
        assert reply.operation.operation_id == "op-1"
        assert (await call.initial_metadata())["x-runner-initial"] == "hello"
        trailing = await call.trailing_metadata()
        assert (trailing["x-runner-trailing"], trailing["x-bin"]) == ("bye", b"\x00\x01")
        seen = upstream.seen_metadata[0]
        assert (seen["x-caller"], seen["x-id-bin"]) == ("c1", b"\x07")
        remaining = upstream.seen_time_remaining[0]
        # Propagated (not None) and not lengthened beyond grpc-timeout's rounding.
        assert remaining is not None and remaining < 5.5

    run_through_proxy(scenario)


def test_blackhole_for_a_duration_then_heals() -> None:
    """blackhole for=: calls are held and never forwarded, then traffic flows again."""

    async def scenario(proxy: FaultProxy, upstream: ScriptedRunner, stub: object) -> None:
        proxy.add_rule("blackhole method=Dispatch for=300ms")
        assert await call_dispatch(stub, "op-held") == UNAVAILABLE  # type: ignore[arg-type]
        assert upstream.dispatched == []
        codes = []
        for _ in range(20):  # the hold ends at expiry; allow for timer granularity
            codes.append(await call_dispatch(stub, "op-after"))  # type: ignore[arg-type]
            if codes[-1] == OK:
                break
            await asyncio.sleep(0.05)
        assert codes[-1] == OK
        assert upstream.dispatched == ["op-after"]
        assert proxy.rules.rules()[0].expired is True

    run_through_proxy(scenario)


@pytest.mark.rule("C9")
def test_server_stream_is_forwarded() -> None:
    """WatchOperations (server streaming) passes through message by message (C9)."""

    async def scenario(proxy: FaultProxy, upstream: ScriptedRunner, stub: object) -> None:
        request = runner_pb2.WatchOperationsRequest(after_sequence=10)
        got = [m async for m in stub.WatchOperations(request, timeout=5)]  # type: ignore[attr-defined]
        assert [m.operation.sequence for m in got] == [11, 12, 13]
        assert {m.incarnation_id for m in got} == {INCARNATION}

    run_through_proxy(scenario)


@pytest.mark.parametrize(
    "rule",
    [
        "drop-response method=WatchOperations messages=2",
        "reset method=WatchOperations at=response messages=2",
    ],
)
def test_server_stream_is_cut_after_n_messages(rule: str) -> None:
    """A stream cut by drop-response/reset delivers N messages, then UNAVAILABLE."""

    async def scenario(proxy: FaultProxy, upstream: ScriptedRunner, stub: object) -> None:
        proxy.add_rule(rule)
        got = []
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for message in stub.WatchOperations(  # type: ignore[attr-defined]
                runner_pb2.WatchOperationsRequest(), timeout=5
            ):
                got.append(message.operation.sequence)
        assert caught.value.code() == UNAVAILABLE
        assert got == [1, 2]

    run_through_proxy(scenario)


def test_drop_request_on_a_stream_sends_nothing() -> None:
    """drop-request on WatchOperations: UNAVAILABLE before any message."""

    async def scenario(proxy: FaultProxy, upstream: ScriptedRunner, stub: object) -> None:
        proxy.add_rule(parse_rule("drop-request method=WatchOperations"))
        got = []
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for message in stub.WatchOperations(  # type: ignore[attr-defined]
                runner_pb2.WatchOperationsRequest(), timeout=5
            ):
                got.append(message)
        assert caught.value.code() == UNAVAILABLE
        assert got == []

    run_through_proxy(scenario)


def test_upstream_down_is_unavailable() -> None:
    """An unreachable upstream surfaces as the channel's own UNAVAILABLE."""

    async def main() -> None:
        async with scripted_upstream() as (_, address):
            pass  # stopped: nothing listens on this address any more
        async with (
            await start_proxy(address) as proxy,
            grpc.aio.insecure_channel(proxy.address) as channel,
        ):
            code = await call_dispatch(runner_pb2_grpc.RunnerServiceStub(channel), "op-1")
            assert code == UNAVAILABLE

    asyncio.run(main())


@pytest.mark.parametrize(
    ("listen", "upstream", "role"),
    [
        ("0.0.0.0:0", "127.0.0.1:1", "listen"),
        ("10.1.2.3:0", "127.0.0.1:1", "listen"),
        ("127.0.0.1:0", "192.0.2.1:50051", "upstream"),
        ("127.0.0.1:0", "example.com:443", "upstream"),
        ("127.0.0.1:0", "no-port", "upstream"),
    ],
)
def test_non_loopback_address_is_refused(listen: str, upstream: str, role: str) -> None:
    """Bad input: a non-loopback listen or upstream address is refused with a clear error."""
    with pytest.raises(NonLoopbackAddressError, match=role):
        asyncio.run(start_proxy(upstream, listen=listen))


def test_used_listen_port_is_refused() -> None:
    """A listen port already in use is refused (turnwire.serving), never shared."""

    async def main() -> None:
        async with scripted_upstream() as (_, address):
            with pytest.raises(AddressInUseError):
                await start_proxy(address, listen=address)

    asyncio.run(main())


def test_health_and_reflection_are_forwarded_and_faulted() -> None:
    """Transparent proxy: health and reflection (bidi) reach the upstream; faults apply."""

    async def scenario(proxy: FaultProxy, upstream: ScriptedRunner, stub: object) -> None:
        channel = grpc.aio.insecure_channel(proxy.address)
        async with channel:
            reflection = reflection_pb2_grpc.ServerReflectionStub(channel)

            async def ask() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
                yield reflection_pb2.ServerReflectionRequest(list_services="")

            replies = [r async for r in reflection.ServerReflectionInfo(ask(), timeout=5)]
            names = {s.name for s in replies[0].list_services_response.service}
            assert "turnwire.runner.v1.RunnerService" in names  # the upstream answered
            health = health_pb2_grpc.HealthStub(channel)
            ok = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert ok.status == health_pb2.HealthCheckResponse.SERVING
            proxy.add_rule("blackhole method=grpc.health.v1.Health/Check")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await health.Check(health_pb2.HealthCheckRequest(), timeout=0.3)
            assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

    run_through_proxy(scenario)


def test_upstream_restarted_on_the_same_port_is_reached_again() -> None:
    """A runner restarted behind the proxy is reachable again (short reconnect backoff)."""

    async def main() -> None:
        async with scripted_upstream() as (_, address):
            proxy = await start_proxy(address)
        async with proxy, grpc.aio.insecure_channel(proxy.address) as channel:
            stub = runner_pb2_grpc.RunnerServiceStub(channel)
            assert await call_dispatch(stub, "op-down") == UNAVAILABLE
            restarted = ScriptedRunner()
            async with scripted_upstream(restarted, listen=address):
                codes = []
                for _ in range(50):  # bounded: 50 tries, ~5 s
                    codes.append(await call_dispatch(stub, "op-up", deadline_s=1))
                    if codes[-1] == OK:
                        break
                    await asyncio.sleep(0.1)
                assert codes[-1] == OK
                assert restarted.dispatched == ["op-up"]

    asyncio.run(main())
