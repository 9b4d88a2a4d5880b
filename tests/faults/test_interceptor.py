"""The fault interceptor: the proxy's table, applied in-process on a real channel."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import grpc
import pytest

from tests.faults.cases import DISPATCH_CASES, OK, UNAVAILABLE, Case
from tests.faults.scripted_runner import (
    INCARNATION,
    ScriptedRunner,
    call_dispatch,
    dispatch_request,
    scripted_upstream,
)
from turnwire import errors
from turnwire.faults import RuleSet, fault_interceptors, parse_rule
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc

Scenario = Callable[[RuleSet, ScriptedRunner, runner_pb2_grpc.RunnerServiceStub], Awaitable[None]]


def run_with_interceptor(scenario: Scenario, runner: ScriptedRunner | None = None) -> None:
    """Upstream + a caller channel carrying a FaultInterceptor, all real, all torn down."""

    async def main() -> None:
        rules = RuleSet(seed=1)
        async with scripted_upstream(runner) as (upstream, address):
            channel = grpc.aio.insecure_channel(address, interceptors=fault_interceptors(rules))
            async with channel:
                await scenario(rules, upstream, runner_pb2_grpc.RunnerServiceStub(channel))

    asyncio.run(main())


@pytest.mark.rule("C7")
@pytest.mark.parametrize("case", DISPATCH_CASES, ids=[c.name for c in DISPATCH_CASES])
def test_dispatch_fault_table(case: Case) -> None:
    """C7 faults in-process: each rule gives the caller its status and the server its arrivals."""

    async def scenario(rules: RuleSet, upstream: ScriptedRunner, stub: object) -> None:
        for text in case.rules:
            rules.add(parse_rule(text))
        try:
            await stub.Dispatch(dispatch_request("op-1"), timeout=case.timeout)  # type: ignore[attr-defined]
            code, details = OK, ""
        except grpc.aio.AioRpcError as error:
            code, details = error.code(), error.details() or ""
        assert code == case.code
        # Final already: the interceptor raised only after its call (if any) ended.
        assert len(upstream.dispatched) == case.arrived
        if case.details is not None:
            assert case.details in details

    run_with_interceptor(scenario)


def test_nth_selects_only_that_call() -> None:
    """nth=2: only the second Dispatch loses its reply; all three reach the server."""

    async def scenario(rules: RuleSet, upstream: ScriptedRunner, stub: object) -> None:
        rules.add(parse_rule("drop-response method=Dispatch nth=2"))
        codes = [await call_dispatch(stub, f"op-{i}") for i in range(3)]  # type: ignore[arg-type]
        assert codes == [OK, UNAVAILABLE, OK]
        assert upstream.dispatched == ["op-0", "op-1", "op-2"]

    run_with_interceptor(scenario)


def test_operation_id_selects_only_that_operation() -> None:
    """op=: only calls for that operation id are dropped, read from the request message."""

    async def scenario(rules: RuleSet, upstream: ScriptedRunner, stub: object) -> None:
        rules.add(parse_rule("drop-request op=op-b"))
        ops = ("op-a", "op-b", "op-c")
        codes = [await call_dispatch(stub, op) for op in ops]  # type: ignore[arg-type]
        assert codes == [OK, UNAVAILABLE, OK]
        assert upstream.dispatched == ["op-a", "op-c"]

    run_with_interceptor(scenario)


@pytest.mark.rule("C6")
def test_typed_refusal_passes_through_intact() -> None:
    """C6: with no fault firing, a typed refusal reaches the caller unchanged."""
    runner = ScriptedRunner(refuse={"op-refused"})

    async def scenario(rules: RuleSet, upstream: ScriptedRunner, stub: object) -> None:
        rules.add(parse_rule("drop-request op=someone-else"))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Dispatch(dispatch_request("op-refused"), timeout=5)  # type: ignore[attr-defined]
        typed = errors.error_info(caught.value)
        assert typed is not None
        assert (typed.reason, typed.metadata) == (
            "INCARNATION_MISMATCH",
            {"incarnation_id": INCARNATION},
        )

    run_with_interceptor(scenario, runner)


@pytest.mark.rule("C7")
def test_drop_response_hides_a_typed_refusal() -> None:
    """C7: drop-response turns even a refusal into an untyped UNAVAILABLE."""
    runner = ScriptedRunner(refuse={"op-refused"})

    async def scenario(rules: RuleSet, upstream: ScriptedRunner, stub: object) -> None:
        rules.add(parse_rule("drop-response"))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Dispatch(dispatch_request("op-refused"), timeout=5)  # type: ignore[attr-defined]
        assert caught.value.code() == UNAVAILABLE
        assert errors.error_info(caught.value) is None
        assert upstream.dispatched == ["op-refused"]

    run_with_interceptor(scenario, runner)


def test_blackhole_for_a_duration_then_heals() -> None:
    """blackhole for=: calls are held and never sent, then traffic flows again."""

    async def scenario(rules: RuleSet, upstream: ScriptedRunner, stub: object) -> None:
        rules.add(parse_rule("blackhole method=Dispatch for=300ms"))
        assert await call_dispatch(stub, "op-held") == UNAVAILABLE  # type: ignore[arg-type]
        codes = []
        for _ in range(20):  # the hold ends at expiry; allow for timer granularity
            codes.append(await call_dispatch(stub, "op-after"))  # type: ignore[arg-type]
            if codes[-1] == OK:
                break
            await asyncio.sleep(0.05)
        assert codes[-1] == OK
        assert upstream.dispatched == ["op-after"]

    run_with_interceptor(scenario)


def test_server_stream_passes_untouched_without_a_rule() -> None:
    """WatchOperations through the interceptor with no matching rule is unchanged."""

    async def scenario(rules: RuleSet, upstream: ScriptedRunner, stub: object) -> None:
        rules.add(parse_rule("drop-request method=Dispatch"))
        request = runner_pb2.WatchOperationsRequest(after_sequence=10)
        got = [m async for m in stub.WatchOperations(request, timeout=5)]  # type: ignore[attr-defined]
        assert [m.operation.sequence for m in got] == [11, 12, 13]

    run_with_interceptor(scenario)


STREAM_CASES = [
    ("drop-response method=WatchOperations messages=2", [1, 2], UNAVAILABLE),
    ("reset method=WatchOperations at=response messages=1", [1], UNAVAILABLE),
    ("drop-request method=WatchOperations", [], UNAVAILABLE),
    ("delay-response method=WatchOperations ms=20", [1, 2, 3], OK),
    ("delay-request method=WatchOperations ms=20", [1, 2, 3], OK),
]


@pytest.mark.parametrize(("rule", "sequences", "code"), STREAM_CASES)
def test_server_stream_faults(rule: str, sequences: list[int], code: grpc.StatusCode) -> None:
    """Stream faults: cut after N messages, dropped before any, or merely delayed."""

    async def scenario(rules: RuleSet, upstream: ScriptedRunner, stub: object) -> None:
        rules.add(parse_rule(rule))
        got: list[int] = []
        outcome = OK
        try:
            async for message in stub.WatchOperations(  # type: ignore[attr-defined]
                runner_pb2.WatchOperationsRequest(), timeout=5
            ):
                got.append(message.operation.sequence)
        except grpc.aio.AioRpcError as error:
            outcome = error.code()
        assert (got, outcome) == (sequences, code)

    run_with_interceptor(scenario)
