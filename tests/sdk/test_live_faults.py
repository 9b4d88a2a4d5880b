"""Lost replies and cut streams on a real network path (turnwire.faults proxy), §7."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from turnwire.client import AsyncTurnwireClient, OperationState, TurnwireClient

from .live_stack import FAST_RETRY, TOKEN, LiveStack, operation_count

pytestmark = pytest.mark.timeout(90)
WAIT = 30.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with LiveStack(tmp_path_factory.mktemp("live-faults")) as live:
        yield live


def test_a_lost_submit_reply_is_retried_into_the_same_operation(
    stack: LiveStack, proxied: TurnwireClient
) -> None:
    """§7: the coordinator accepted, the reply was lost; the retry (same key) is a replay."""
    before = operation_count(proxied)
    dropped = stack.fault_stats().dropped_responses
    stack.add_fault("drop-response method=SubmitTurn count=1")
    submitted = proxied.submit(items=["lost reply"])
    assert stack.fault_stats().dropped_responses == dropped + 1
    assert submitted.replayed is True
    assert operation_count(proxied) == before + 1
    final = proxied.wait(submitted.operation.operation_id, timeout=WAIT)
    assert final.state is OperationState.SUCCEEDED and final.attempt_count == 1


def test_a_cut_watch_stream_resumes_without_gaps_or_repeats(
    stack: LiveStack, proxied: TurnwireClient
) -> None:
    """§7: a watch reset after one message reopens from its cursor; every event once."""
    operation_id = proxied.submit(items=["cut"], parameters={"sleep_ms": "300"}).operation
    resets = stack.fault_stats().reset
    stack.add_fault("reset method=WatchOperation at=response messages=1 count=2")
    events = list(proxied.watch(operation_id.operation_id, timeout=WAIT))
    assert stack.fault_stats().reset == resets + 2
    sequences = [event.sequence for event in events]
    assert sequences == list(range(1, len(sequences) + 1))
    assert events[-1].to_state is OperationState.SUCCEEDED


def test_the_async_client_retries_a_lost_submit_reply_with_the_same_key(stack: LiveStack) -> None:
    """§7 (asyncio client): a dropped SubmitTurn reply comes back as the same operation."""
    stack.clear_faults()
    stack.add_fault("drop-response method=SubmitTurn count=1")

    async def scenario() -> None:
        async with AsyncTurnwireClient(stack.proxy_address, TOKEN, retries=FAST_RETRY) as client:
            submitted = await client.submit(items=["async lost reply"])
            assert submitted.replayed is True
            final = await client.wait(submitted.operation.operation_id, timeout=WAIT)
            assert final.state is OperationState.SUCCEEDED

    try:
        asyncio.run(scenario())
    finally:
        stack.clear_faults()


def test_the_async_watch_resumes_after_a_cut_stream(stack: LiveStack) -> None:
    """§7 (asyncio client): a reset watch reopens from its cursor; every event once."""
    stack.clear_faults()

    async def scenario() -> None:
        async with AsyncTurnwireClient(stack.proxy_address, TOKEN, retries=FAST_RETRY) as client:
            submitted = await client.submit(items=["a"], parameters={"sleep_ms": "300"})
            resets = stack.fault_stats().reset
            stack.add_fault("reset method=WatchOperation at=response messages=1 count=2")
            operation_id = submitted.operation.operation_id
            events = [event async for event in client.watch(operation_id, timeout=WAIT)]
            assert stack.fault_stats().reset == resets + 2
            sequences = [event.sequence for event in events]
            assert sequences == list(range(1, len(sequences) + 1))
            assert events[-1].to_state is OperationState.SUCCEEDED

    try:
        asyncio.run(scenario())
    finally:
        stack.clear_faults()
