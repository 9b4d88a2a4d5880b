"""PROTOCOL.md §12 S5, S6: the relay's bounded buffer and slow watchers, on a real stack
whose coordinator runs with a small --stream-relay-buffer-bytes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.streaming.stack import METADATA, StreamStack, submit_request
from turnwire.coordinator.v1 import coordinator_pb2

CALL_TIMEOUT = 30.0
SUCCEEDED = coordinator_pb2.OPERATION_STATE_SUCCEEDED


@pytest.fixture
def small(tmp_path: Path) -> Iterator[StreamStack]:
    # Three 300-byte chunks fit; a fourth drops the oldest.
    with StreamStack(tmp_path, relay_buffer_bytes=1000) as running:
        yield running


def _watch(stub: Any, op_id: str, after_offset: int = 0) -> Any:
    request = coordinator_pb2.WatchOperationRequest(
        operation_id=op_id, stream_output=True, after_offset=after_offset
    )
    return stub.WatchOperation(request, metadata=METADATA, timeout=CALL_TIMEOUT)


def _covered(messages: list[Any]) -> tuple[list[int], list[tuple[int, int]]]:
    """The chunk offsets and the gaps (after, next) a watcher was sent, in order."""
    offsets, gaps = [], []
    for m in messages:
        kind = m.WhichOneof("output")
        if kind == "chunk":
            offsets.append(m.chunk.offset)
        elif kind == "gap":
            gaps.append((m.gap.after_offset, m.gap.next_offset))
    return offsets, gaps


def _no_silent_hole(messages: list[Any], final: int) -> None:
    """Every offset 1..final was either sent as a chunk or named by a gap, in order."""
    cursor = 0
    for m in messages:
        kind = m.WhichOneof("output")
        if kind == "gap":
            assert m.gap.after_offset == cursor
            cursor = m.gap.next_offset - 1
        elif kind == "chunk":
            assert m.chunk.offset == cursor + 1, (m.chunk.offset, cursor)
            cursor = m.chunk.offset
    assert cursor == final


@pytest.mark.rule("S5")
def test_offsets_dropped_from_the_relay_buffer_are_a_gap_to_a_reader_asking_for_them(
    small: StreamStack,
) -> None:
    """S5: a watcher asking from offset 0 after the buffer dropped 1..7 is told
    gap 0..8, then gets 8, 9, 10 and the terminal event."""
    channel, stub = small.stub()
    with channel:
        op_id = stub.SubmitTurn(
            submit_request("k-over", chunks="10", pause_ms="20", size="300", start_ms="200"),
            metadata=METADATA,
        ).operation.operation_id
        first = list(_watch(stub, op_id))  # keeps the buffer alive and follows live
        late = list(_watch(stub, op_id))  # the buffer now holds the last three only
    assert _covered(first)[0] == list(range(1, 11))
    offsets, gaps = _covered(late)
    assert gaps == [(0, 8)]
    assert offsets == [8, 9, 10]
    assert late[-1].event.to_state == SUCCEEDED
    assert len(late[-1].operation.result.output) == 3000  # the result is whole (S4)


@pytest.mark.rule("S6")
def test_a_slow_watcher_does_not_hold_up_a_fast_one_and_is_told_what_it_lost(
    tmp_path: Path,
) -> None:
    """S6: one watcher reads nothing until the other has had the whole stream and
    the terminal event (so it held up neither that watcher nor the upstream);
    then the slow one gets its chunks, its loss said by a gap naming where to
    resume, never a silent hole. (Whether the fast one keeps up with 6 MB/s
    depends on this machine's load, not on the slow one: any chunk it lost
    must be said too.)"""
    with StreamStack(tmp_path, relay_buffer_bytes=1024 * 1024) as stack:
        channel, stub = stack.stub()
        with channel:
            op_id = stub.SubmitTurn(
                submit_request("k-slow", chunks="200", pause_ms="10", size="60000", start_ms="300"),
                metadata=METADATA,
            ).operation.operation_id
            slow = _watch(stub, op_id)  # opened first, not read yet
            fast = list(_watch(stub, op_id))
            _no_silent_hole(fast, 200)
            assert fast[-1].event.to_state == SUCCEEDED
            late = list(slow)
    # 12 MB behind a 1 MiB buffer: more than gRPC's flow-control windows take in.
    assert _covered(late)[1], "the slow watcher lost chunks without being told"
    _no_silent_hole(late, 200)
    assert late[-1].event.to_state == SUCCEEDED
