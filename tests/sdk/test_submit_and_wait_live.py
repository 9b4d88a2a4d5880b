"""submit_and_wait against a real coordinator and runner, directly and through the
fault proxy (lost first message, cut streams): issue 10, PROTOCOL.md §7."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc
import grpc.aio
import pytest

from turnwire.client import (
    AsyncTurnwireClient,
    Execution,
    FixTheRequest,
    OperationState,
    TurnwireClient,
    UseANewIdempotencyKey,
)
from turnwire.coordinator.v1 import coordinator_pb2

from .live_stack import FAST_RETRY, TOKEN, LiveStack, operation_count

pytestmark = pytest.mark.timeout(90)
WAIT = 30.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with LiveStack(tmp_path_factory.mktemp("live-submit-and-wait")) as live:
        yield live


def _calls(stack: LiveStack) -> int:
    return stack.fault_stats().calls_by_method.get(
        "/turnwire.coordinator.v1.TurnService/SubmitAndWatch", 0
    )


def test_submit_and_wait_runs_the_turn_to_succeeded_and_a_repeat_is_the_same_turn(
    stack: LiveStack,
) -> None:
    """Issue 10: one call returns the terminal operation (the echoed result, run once);
    the same key again returns that same operation; a refusal is submit's."""
    with TurnwireClient(stack.address, TOKEN) as client:
        before = operation_count(client)
        final = client.submit_and_wait(items=["hello"], idempotency_key="sw-1", timeout=WAIT)
        assert (final.state, final.execution) == (OperationState.SUCCEEDED, Execution.STARTED)
        assert final.result is not None and final.result.output == b"hello"
        assert final.attempt_count == 1
        again = client.submit_and_wait(items=["hello"], idempotency_key="sw-1", timeout=WAIT)
        assert again == final
        assert operation_count(client) == before + 1
        with pytest.raises(UseANewIdempotencyKey):
            client.submit_and_wait(items=["other"], idempotency_key="sw-1", timeout=WAIT)
        with pytest.raises(FixTheRequest) as raised:
            client.submit_and_wait(items=["x"], kind="unspecified", timeout=WAIT)
        assert raised.value.reason == "TURN_INVALID"
        assert operation_count(client) == before + 1


SUBMIT_AND_WATCH = "/turnwire.coordinator.v1.TurnService/SubmitAndWatch"


class _Counted:
    """A response stream that notes each reply the client reads from it."""

    def __init__(self, call: Any, replies: list[Any]) -> None:
        self._call = call
        self._replies = replies

    def __iter__(self) -> _Counted:
        return self

    def __next__(self) -> Any:
        reply = next(self._call)
        self._replies.append(reply)
        return reply

    def cancel(self) -> bool:
        return bool(self._call.cancel())


class _Recorder(grpc.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """The SubmitAndWatch requests a sync client sends, and the replies it reads."""

    def __init__(self) -> None:
        self.requests: list[coordinator_pb2.SubmitAndWatchRequest] = []
        self.replies: list[coordinator_pb2.SubmitAndWatchResponse] = []

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        call = continuation(details, request)
        if details.method != SUBMIT_AND_WATCH:
            return call
        self.requests.append(request)
        return _Counted(call, self.replies)


class _AsyncRecorder(grpc.aio.UnaryStreamClientInterceptor):
    """The same for the asyncio client."""

    def __init__(self) -> None:
        self.requests: list[coordinator_pb2.SubmitAndWatchRequest] = []
        self.replies: list[coordinator_pb2.SubmitAndWatchResponse] = []

    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: Any, request: Any
    ) -> Any:
        call = await continuation(details, request)
        if details.method not in (SUBMIT_AND_WATCH, SUBMIT_AND_WATCH.encode()):  # bytes here
            return call
        self.requests.append(request)

        async def counted() -> AsyncIterator[Any]:
            async for reply in call:
                self.replies.append(reply)
                yield reply

        return counted()


def _acceptance_and_terminal_only(
    requests: list[coordinator_pb2.SubmitAndWatchRequest],
    replies: list[coordinator_pb2.SubmitAndWatchResponse],
) -> None:
    assert [(r.terminal_only, r.after_sequence) for r in requests] == [(True, 0)]
    assert [m.event.to_state for m in replies] == [
        coordinator_pb2.OPERATION_STATE_QUEUED,
        coordinator_pb2.OPERATION_STATE_SUCCEEDED,
    ]
    assert replies[0].event.sequence == 1
    assert replies[-1].operation.state == coordinator_pb2.OPERATION_STATE_SUCCEEDED


def test_both_clients_receive_only_the_acceptance_and_the_terminal_event(
    stack: LiveStack,
) -> None:
    """§7, issue 10: submit_and_wait asks for terminal_only, so a real coordinator sends two
    messages per turn (QUEUED, the terminal one), not every transition."""
    recorder = _Recorder()
    channel = grpc.intercept_channel(grpc.insecure_channel(stack.address), recorder)
    try:
        client = TurnwireClient(stack.address, TOKEN, channel=channel)
        final = client.submit_and_wait(items=["two"], timeout=WAIT)
    finally:
        channel.close()
    assert final.state is OperationState.SUCCEEDED
    _acceptance_and_terminal_only(recorder.requests, recorder.replies)
    assert recorder.replies[-1].operation.operation_id == final.operation_id

    async def scenario() -> None:
        recorded = _AsyncRecorder()
        async with grpc.aio.insecure_channel(stack.address, interceptors=[recorded]) as chan:
            client = AsyncTurnwireClient(stack.address, TOKEN, channel=chan)
            done = await client.submit_and_wait(items=["two"], timeout=WAIT)
        assert done.state is OperationState.SUCCEEDED
        _acceptance_and_terminal_only(recorded.requests, recorded.replies)

    asyncio.run(scenario())


def test_a_lost_first_message_is_retried_into_the_same_operation(
    stack: LiveStack, proxied: TurnwireClient
) -> None:
    """§7: the coordinator accepted, the stream broke before its first message; the
    retry (same key) replays the accepted turn: one operation, run once."""
    before = operation_count(proxied)
    calls = _calls(stack)
    stack.add_fault("drop-response method=SubmitAndWatch count=1")
    final = proxied.submit_and_wait(items=["lost"], timeout=WAIT)
    assert final.state is OperationState.SUCCEEDED and final.attempt_count == 1
    assert _calls(stack) == calls + 2
    assert operation_count(proxied) == before + 1


def test_cut_streams_resume_into_the_same_operation(
    stack: LiveStack, proxied: TurnwireClient
) -> None:
    """§7: a stream reset after its first message (the acceptance: terminal_only sends
    just it and the terminal event) is called again, resuming after it, and gets the
    terminal event; the turn is submitted once and runs once."""
    before = operation_count(proxied)
    calls = _calls(stack)
    stack.add_fault("reset method=SubmitAndWatch at=response messages=1 count=1")
    final = proxied.submit_and_wait(items=["cut"], parameters={"sleep_ms": "300"}, timeout=WAIT)
    assert final.state is OperationState.SUCCEEDED and final.attempt_count == 1
    assert _calls(stack) == calls + 2
    assert operation_count(proxied) == before + 1


def test_the_async_client_submits_and_waits_through_cut_streams(stack: LiveStack) -> None:
    """The asyncio client: the same call, the same resume after a cut stream, the same
    replay for the same key."""
    stack.clear_faults()

    async def scenario() -> None:
        async with AsyncTurnwireClient(stack.proxy_address, TOKEN, retries=FAST_RETRY) as client:
            calls = _calls(stack)
            stack.add_fault("reset method=SubmitAndWatch at=response messages=1 count=1")
            final = await client.submit_and_wait(
                items=["async"], idempotency_key="sw-async", timeout=WAIT
            )
            assert final.state is OperationState.SUCCEEDED and final.attempt_count == 1
            assert final.result is not None and final.result.output == b"async"
            assert _calls(stack) == calls + 2  # cut after the acceptance, resumed once
            again = await client.submit_and_wait(
                items=["async"], idempotency_key="sw-async", timeout=WAIT
            )
            assert again.operation_id == final.operation_id
            with pytest.raises(UseANewIdempotencyKey):
                await client.submit_and_wait(items=["b"], idempotency_key="sw-async")

    try:
        asyncio.run(scenario())
    finally:
        stack.clear_faults()
