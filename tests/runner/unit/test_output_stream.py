"""Bounded, offset-numbered output streams (PROTOCOL.md R13), pure (turnwire/output_stream.py)."""

from __future__ import annotations

import pytest

from turnwire.output_stream import (
    CHUNK_TOO_LARGE,
    STREAM_BUDGET_EXHAUSTED,
    STREAM_CLOSED,
    Chunk,
    OutputStream,
    OutputStreams,
    Refusal,
    StreamLimits,
)

SMALL = StreamLimits(
    max_chunk_bytes=4, turn_budget_bytes=20, stream_buffer_bytes=8, total_buffer_bytes=12
)


def emit_all(streams: OutputStreams, key: str, *pieces: bytes) -> list[int]:
    offsets = []
    for piece in pieces:
        chunk = streams.emit(key, piece, "text/plain", 1.0)
        assert isinstance(chunk, Chunk), chunk
        offsets.append(chunk.offset)
    return offsets


@pytest.mark.rule("R13")
def test_chunks_are_numbered_from_one_in_emit_order_and_read_from_any_cursor() -> None:
    """R13: offsets 1, 2, 3 ...; a reader after offset N gets N+1 onwards, no gap."""
    streams = OutputStreams(StreamLimits())
    streams.open("op")
    assert emit_all(streams, "op", b"a", b"b", b"c") == [1, 2, 3]
    read = streams.read("op", 0, 10)
    assert read is not None and [c.data for c in read.chunks] == [b"a", b"b", b"c"]
    assert read.gap_next_offset is None and read.final_offset is None and read.cursor == 3
    middle = streams.read("op", 1, 10)
    assert middle is not None and [c.offset for c in middle.chunks] == [2, 3]
    assert streams.read("op", 3, 10) == streams.read("op", 3, 1)  # nothing yet: no end
    limited = streams.read("op", 0, 2)
    assert limited is not None and [c.offset for c in limited.chunks] == [1, 2]


@pytest.mark.rule("R13")
def test_a_closed_stream_ends_once_the_reader_has_its_last_chunk() -> None:
    """R13: the end comes with the final offset, only after every chunk was given."""
    stream = OutputStream()
    for piece in (b"x", b"y"):
        stream.append(piece, "t", 0.0, StreamLimits())
    assert stream.close() == 2
    assert stream.read(0, 1).final_offset is None  # one more chunk to give first
    assert stream.read(1, 10).final_offset == 2
    assert stream.read(2, 10).final_offset == 2
    assert OutputStream().close() == 0  # an execution that emitted nothing


@pytest.mark.rule("R13")
def test_a_full_stream_drops_its_oldest_and_a_reader_behind_is_told_the_gap() -> None:
    """R13: past the per-operation buffer the oldest chunks go; a reader whose next
    chunk is gone gets a gap naming where the stream goes on, never a silent hole."""
    streams = OutputStreams(SMALL)
    streams.open("op")
    emit_all(streams, "op", b"1111", b"2222", b"3333")  # 12 bytes, the buffer holds 8
    read = streams.read("op", 0, 10)
    assert read is not None and read.gap_next_offset == 2
    assert [c.offset for c in read.chunks] == [2, 3] and read.cursor == 3
    caught_up = streams.read("op", 1, 10)  # had chunk 1: nothing lost to it
    assert caught_up is not None and caught_up.gap_next_offset is None
    assert [c.offset for c in caught_up.chunks] == [2, 3]


@pytest.mark.rule("R13")
def test_a_gap_is_reported_only_when_an_unseen_chunk_is_gone() -> None:
    """R13: cursor + 1 still held means no gap, whatever was dropped before it."""
    stream = OutputStream()
    for piece in (b"1111", b"2222", b"3333"):
        stream.append(piece, "t", 0.0, SMALL)
    assert stream.first_held == 2
    assert stream.read(1, 10).gap_next_offset is None
    assert stream.read(0, 10).gap_next_offset == 2
    stream.close()
    emptied = OutputStream()
    emptied.append(b"1111", "t", 0.0, SMALL)
    emptied.drop_oldest()
    emptied.close()
    everything_lost = emptied.read(0, 10)
    assert everything_lost.gap_next_offset == 2 and everything_lost.chunks == ()
    assert everything_lost.final_offset == 1 and everything_lost.cursor == 1


@pytest.mark.rule("R13")
def test_oversized_and_over_budget_chunks_are_refused_and_change_nothing() -> None:
    """R13: a chunk over the limit, or past the turn's budget, is refused to the
    executor; the stream is as it was and later small chunks still go."""
    stream = OutputStream()
    big = stream.append(b"12345", "t", 0.0, SMALL)
    assert isinstance(big, Refusal) and big.reason == CHUNK_TOO_LARGE
    for _ in range(5):
        assert isinstance(stream.append(b"abcd", "t", 0.0, SMALL), Chunk)
    over = stream.append(b"a", "t", 0.0, SMALL)
    assert isinstance(over, Refusal) and over.reason == STREAM_BUDGET_EXHAUSTED
    assert stream.next_offset == 6 and stream.emitted_bytes == 20
    stream.close()
    closed = stream.append(b"a", "t", 0.0, StreamLimits())
    assert isinstance(closed, Refusal) and closed.reason == STREAM_CLOSED


@pytest.mark.rule("R13")
def test_the_runner_bound_drops_settled_streams_first_then_the_biggest_live_one() -> None:
    """R13: past the per-runner bound, chunks of closed streams go first (oldest
    closed first), then the oldest chunk of the open stream holding the most."""
    streams = OutputStreams(SMALL)
    for key in ("done", "big", "small"):
        streams.open(key)
    emit_all(streams, "done", b"dddd", b"dddd")
    streams.close("done")
    emit_all(streams, "big", b"bbbb")
    emit_all(streams, "small", b"s")  # 13 bytes held: over 12
    assert streams.held_bytes <= 12
    assert streams.streams["done"].first_held == 2  # the settled stream paid
    assert streams.streams["big"].first_held == 1 and streams.streams["small"].first_held == 1
    emit_all(streams, "big", b"bbbb")  # the settled one goes entirely, then the biggest
    emit_all(streams, "big", b"bbbb")
    assert not streams.streams["done"].held
    assert streams.streams["big"].first_held == 2 and streams.streams["small"].first_held == 1
    assert streams.held_bytes == sum(s.held_bytes for s in streams.streams.values()) <= 12
    streams.forget("big")
    assert streams.held_bytes == 1 and streams.read("big", 0, 1) is None


def test_an_emit_for_a_stream_nobody_opened_is_refused_closed() -> None:
    refused = OutputStreams(StreamLimits()).emit("nobody", b"x", "t", 0.0)
    assert isinstance(refused, Refusal) and refused.reason == STREAM_CLOSED


@pytest.mark.parametrize(
    "limits",
    [
        {"max_chunk_bytes": 0},
        {"max_chunk_bytes": 10, "stream_buffer_bytes": 5},
        {"stream_buffer_bytes": 10, "total_buffer_bytes": 5, "max_chunk_bytes": 5},
        {"turn_budget_bytes": 1},
    ],
)
def test_limits_that_do_not_fit_together_are_refused(limits: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        StreamLimits(**limits)
