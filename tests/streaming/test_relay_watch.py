"""PROTOCOL.md §12: streamed output reaches the clients watching the operation.

A real runner serving ``tests.streaming.emitters:count`` and a real
coordinator (tests/streaming/stack.py); raw TurnService stubs, so what is
checked is exactly what goes on the wire."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.streaming.emitters import chunk_text
from tests.streaming.stack import METADATA, StreamStack, submit_request
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2

CALL_TIMEOUT = 30.0
TERMINAL = {
    coordinator_pb2.OPERATION_STATE_SUCCEEDED,
    coordinator_pb2.OPERATION_STATE_FAILED,
    coordinator_pb2.OPERATION_STATE_CANCELLED,
    coordinator_pb2.OPERATION_STATE_TIMED_OUT,
}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[StreamStack]:
    with StreamStack(tmp_path) as running:
        yield running


def _kinds(messages: list[Any]) -> list[str]:
    """Each message as 'chunk N', 'gap A..B' or the event's target state."""
    out = []
    for m in messages:
        kind = m.WhichOneof("output")
        if kind == "chunk":
            out.append(f"chunk {m.chunk.offset}")
        elif kind == "gap":
            out.append(f"gap {m.gap.after_offset}..{m.gap.next_offset}")
        else:
            out.append(coordinator_pb2.OperationState.Name(m.event.to_state))
    return out


def _chunks(messages: list[Any]) -> list[turn_pb2.OutputChunk]:
    return [m.chunk for m in messages if m.WhichOneof("output") == "chunk"]


def _submit_and_watch(stack: StreamStack, key: str, **parameters: str) -> list[Any]:
    channel, stub = stack.stub()
    with channel:
        request = coordinator_pb2.SubmitAndWatchRequest(
            submit=submit_request(key, **parameters), stream_output=True
        )
        return list(stub.SubmitAndWatch(request, metadata=METADATA, timeout=CALL_TIMEOUT))


@pytest.mark.rule("S1", "S2", "S3", "S4")
def test_submit_and_watch_relays_every_chunk_in_order_before_the_terminal_event(
    stack: StreamStack,
) -> None:
    """S1, S2, S3: with stream_output, chunks 1..N in offset order, none after the
    terminal event, and their bytes are the durable result's (S4)."""
    messages = _submit_and_watch(stack, "k-order", chunks="12", pause_ms="15")
    kinds = _kinds(messages)
    assert kinds[-1] == "OPERATION_STATE_SUCCEEDED"
    chunks = _chunks(messages)
    assert [c.offset for c in chunks] == list(range(1, 13))
    assert not [k for k in kinds if k.startswith("gap")]
    assert all(k.startswith(("chunk", "OPERATION")) for k in kinds)
    relayed = b"".join(c.data for c in chunks)
    assert relayed == messages[-1].operation.result.output
    assert relayed == "".join(chunk_text(n) for n in range(1, 13)).encode()
    assert all(c.HasField("emitted_at") and c.content_type for c in chunks)
    # Every chunk message carries the call's replayed flag and nothing else.
    assert all(not m.HasField("event") for m in messages if m.WhichOneof("output"))


@pytest.mark.rule("S1")
def test_without_stream_output_no_chunk_is_sent(stack: StreamStack) -> None:
    """S1: opt-in; a watch that does not ask gets events only, as before."""
    channel, stub = stack.stub()
    with channel:
        request = coordinator_pb2.SubmitAndWatchRequest(
            submit=submit_request("k-plain", chunks="5", pause_ms="5")
        )
        messages = list(stub.SubmitAndWatch(request, metadata=METADATA, timeout=CALL_TIMEOUT))
    assert all(m.WhichOneof("output") is None for m in messages)
    assert messages[-1].event.to_state == coordinator_pb2.OPERATION_STATE_SUCCEEDED


@pytest.mark.rule("S2", "S3", "S7")
def test_watch_operation_relays_chunks_and_resumes_by_offset_without_a_gap(
    stack: StreamStack,
) -> None:
    """S2, S3, S7: WatchOperation with stream_output relays the chunks before the
    terminal event; a second watch from after_offset 4 gets 5.. with no gap."""
    channel, stub = stack.stub()
    with channel:
        submitted = stub.SubmitTurn(
            submit_request("k-watch", chunks="10", pause_ms="30"), metadata=METADATA
        )
        op_id = submitted.operation.operation_id
        first = stub.WatchOperation(
            coordinator_pb2.WatchOperationRequest(operation_id=op_id, stream_output=True),
            metadata=METADATA,
            timeout=CALL_TIMEOUT,
        )
        seen = []
        for message in first:  # leave after chunk 4, as a client that lost its stream
            seen.append(message)
            if message.WhichOneof("output") == "chunk" and message.chunk.offset == 4:
                break
        first.cancel()
        resumed = list(
            stub.WatchOperation(
                coordinator_pb2.WatchOperationRequest(
                    operation_id=op_id, stream_output=True, after_offset=4
                ),
                metadata=METADATA,
                timeout=CALL_TIMEOUT,
            )
        )
    assert [c.offset for c in _chunks(seen)] == [1, 2, 3, 4]
    kinds = _kinds(resumed)
    assert [c.offset for c in _chunks(resumed)] == list(range(5, 11))
    assert not [k for k in kinds if k.startswith("gap")]
    assert kinds[-1] == "OPERATION_STATE_SUCCEEDED"
    terminal_at = kinds.index("OPERATION_STATE_SUCCEEDED")
    assert all(k.startswith("chunk") for k in kinds[terminal_at + 1 :]) is True
    assert terminal_at == len(kinds) - 1


@pytest.mark.rule("S5")
def test_many_watchers_share_one_upstream(stack: StreamStack) -> None:
    """S5: three watchers of one operation, one StreamOutput from the coordinator."""
    channel, stub = stack.stub()
    with channel:
        submitted = stub.SubmitTurn(
            submit_request("k-fan", chunks="8", pause_ms="40", start_ms="300"), metadata=METADATA
        )
        op_id = submitted.operation.operation_id
        request = coordinator_pb2.WatchOperationRequest(operation_id=op_id, stream_output=True)
        calls = [
            stub.WatchOperation(request, metadata=METADATA, timeout=CALL_TIMEOUT) for _ in range(3)
        ]
        results = [list(call) for call in calls]
    for messages in results:
        assert [c.offset for c in _chunks(messages)] == list(range(1, 9))
        assert _kinds(messages)[-1] == "OPERATION_STATE_SUCCEEDED"
    assert stack.upstreams() == 1


@pytest.mark.rule("S4", "S7")
def test_after_a_coordinator_restart_a_watcher_resumes_from_the_runner_by_offset(
    stack: StreamStack,
) -> None:
    """S4, S7: the relay's buffer dies with the coordinator process; a watcher that
    reconnects with its last offset gets the rest from the runner (which still
    holds the stream), with no gap, then the terminal event with the whole result."""
    channel, stub = stack.stub()
    with channel:
        op_id = stub.SubmitTurn(
            submit_request("k-restart", chunks="30", pause_ms="50"), metadata=METADATA
        ).operation.operation_id
        first = stub.WatchOperation(
            coordinator_pb2.WatchOperationRequest(operation_id=op_id, stream_output=True),
            metadata=METADATA,
            timeout=CALL_TIMEOUT,
        )
        seen = []
        for message in first:
            seen.append(message)
            if message.WhichOneof("output") == "chunk" and message.chunk.offset == 5:
                break
        first.cancel()
    stack.restart_coordinator()
    channel, stub = stack.stub()
    with channel:
        resumed = _resumed_watch(stub, op_id, after_offset=5)
    assert [c.offset for c in _chunks(seen)] == [1, 2, 3, 4, 5]
    kinds = _kinds(resumed)
    assert not [k for k in kinds if k.startswith("gap")]
    assert [c.offset for c in _chunks(resumed)] == list(range(6, 31))
    assert kinds[-1] == "OPERATION_STATE_SUCCEEDED"
    whole = b"".join(c.data for c in _chunks(seen) + _chunks(resumed))
    assert whole == resumed[-1].operation.result.output


def _resumed_watch(stub: Any, op_id: str, *, after_offset: int) -> list[Any]:
    """A watch with the output from ``after_offset``, retried (bounded) while the
    restarted coordinator is not answering yet."""
    deadline = time.monotonic() + CALL_TIMEOUT
    while True:
        try:
            return list(
                stub.WatchOperation(
                    coordinator_pb2.WatchOperationRequest(
                        operation_id=op_id, stream_output=True, after_offset=after_offset
                    ),
                    metadata=METADATA,
                    timeout=CALL_TIMEOUT,
                )
            )
        except grpc.RpcError as error:
            if error.code() is not grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
