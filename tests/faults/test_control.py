"""The control API (FaultControlService) changes a running proxy's rules."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.faults.scripted_runner import DISPATCH, call_dispatch, scripted_upstream
from turnwire import errors
from turnwire.faults import FaultControlClient, NonLoopbackAddressError, parse_rule, start_proxy
from turnwire.faults.control import rule_from_proto, rule_to_proto
from turnwire.faults.v1 import faults_pb2, faults_pb2_grpc
from turnwire.runner.v1 import runner_pb2_grpc

OK = grpc.StatusCode.OK
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(
    "text",
    [
        "drop-request",
        "drop-response method=Dispatch nth=1",
        "delay-response ms=250 op=op-9 count=3 p=0.25",
        "reset at=response messages=2 for=2s",
        "blackhole method=/turnwire.runner.v1.RunnerService/Cancel for=500ms",
    ],
)
def test_rule_proto_round_trip(text: str) -> None:
    """A rule survives the trip through the control API's FaultRule message."""
    rule = parse_rule(text)
    assert rule_from_proto(rule_to_proto(rule)) == rule


def test_rules_changed_at_run_time() -> None:
    """Add, list (with hits), remove and clear rules on a running proxy; stats count faults."""

    async def main() -> None:
        async with scripted_upstream() as (upstream, address):
            proxy = await start_proxy(address, control_listen="127.0.0.1:0")
            assert proxy.control_address is not None
            async with (
                proxy,
                FaultControlClient(proxy.control_address) as control,
                grpc.aio.insecure_channel(proxy.address) as channel,
            ):
                stub = runner_pb2_grpc.RunnerServiceStub(channel)
                assert await call_dispatch(stub, "op-1") == OK
                added = await control.add(parse_rule("drop-request method=Dispatch"))
                assert await call_dispatch(stub, "op-2") == UNAVAILABLE
                [listed] = await control.list()
                assert (listed.rule_id, listed.hits, listed.selected) == (added.rule_id, 1, 1)
                assert await control.remove(added.rule_id) is True
                assert await control.remove(added.rule_id) is False
                assert await call_dispatch(stub, "op-3") == OK
                await control.add(parse_rule("drop-response method=Dispatch"))
                await control.add(parse_rule("reset method=Cancel"))
                assert await call_dispatch(stub, "op-4") == UNAVAILABLE
                assert await control.clear() == 2
                assert await control.list() == []
                assert await call_dispatch(stub, "op-5") == OK
                stats = await control.stats()
                assert upstream.dispatched == ["op-1", "op-3", "op-4", "op-5"]
        assert stats.calls_by_method == {DISPATCH: 5}
        assert (stats.dropped_requests, stats.dropped_responses) == (1, 1)

    asyncio.run(main())


def test_invalid_rule_is_refused_and_changes_nothing() -> None:
    """Bad input: an invalid rule gets INVALID_ARGUMENT / ARGUMENT_INVALID; no rule is added."""

    async def main() -> None:
        async with scripted_upstream() as (_, address):
            proxy = await start_proxy(address, control_listen="127.0.0.1:0")
            async with proxy, grpc.aio.insecure_channel(str(proxy.control_address)) as channel:
                stub = faults_pb2_grpc.FaultControlServiceStub(channel)
                bad = [
                    faults_pb2.FaultRule(),  # no action
                    faults_pb2.FaultRule(action=faults_pb2.FAULT_ACTION_DELAY_REQUEST),  # no ms
                    faults_pb2.FaultRule(action=faults_pb2.FAULT_ACTION_DROP_REQUEST, nth=0),
                    faults_pb2.FaultRule(
                        action=faults_pb2.FAULT_ACTION_DROP_REQUEST, probability=2.0
                    ),
                ]
                for rule in bad:
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        await stub.AddRule(faults_pb2.AddRuleRequest(rule=rule), timeout=5)
                    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                    typed = errors.error_info(caught.value)
                    assert typed is not None and typed.reason == "ARGUMENT_INVALID"
                listed = await stub.ListRules(faults_pb2.ListRulesRequest(), timeout=5)
                assert list(listed.rules) == []

    asyncio.run(main())


def test_control_listen_must_be_loopback() -> None:
    """Bad input: the control API never listens off loopback."""

    async def main() -> None:
        async with scripted_upstream() as (_, address):
            with pytest.raises(NonLoopbackAddressError, match="control"):
                await start_proxy(address, control_listen="0.0.0.0:0")

    asyncio.run(main())
