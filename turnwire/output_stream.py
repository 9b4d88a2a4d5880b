"""Bounded, offset-numbered streams of partial output (PROTOCOL.md R13), pure.

An execution's ``emit()`` calls make one stream per operation: chunk 1, 2, 3,
... in the order they were emitted, with no holes. A reader asks for the
chunks after the last offset it saw and gets what is still held; when some of
those were dropped to keep memory bounded it is told so first (a *gap*: the
offsets after its cursor and before the first one still held are lost to it),
never a silent hole. A stream is *closed* once the execution is over: nothing
more can be emitted, and a reader that got the last chunk is at the end.

Limits (``StreamLimits``): a chunk over ``max_chunk_bytes`` and a chunk that
would take the turn's emitted total past ``turn_budget_bytes`` are refused to
the executor (the turn goes on, nothing is added); a stream holds at most
``stream_buffer_bytes`` (its oldest chunks are dropped to make room for a new
one) and all streams together at most ``total_buffer_bytes`` (closed streams'
chunks go first, oldest closed first; then the oldest chunk of the open stream
holding the most). Emitting never waits for a reader.

No I/O, no clock, no threads: the runner's shell (runner_svc/output_streams.py)
adds the lock, the wake-ups and the keeping after settlement; the executor
test helper (turnwire/executor/testing.py) applies the same limits.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from dataclasses import dataclass

from turnwire.vocabulary import ErrorReason

CHUNK_TOO_LARGE = ErrorReason.CHUNK_TOO_LARGE
STREAM_BUDGET_EXHAUSTED = ErrorReason.STREAM_BUDGET_EXHAUSTED
# Not a wire reason: an emit after the execution ended (a thread it left behind).
STREAM_CLOSED = "STREAM_CLOSED"
MAX_CONTENT_TYPE_CHARS = 255


@dataclass(frozen=True)
class StreamLimits:
    """The bounds of partial output, per chunk, per turn, per stream, in all."""

    max_chunk_bytes: int = 64 * 1024
    turn_budget_bytes: int = 16 * 1024 * 1024
    stream_buffer_bytes: int = 1024 * 1024
    total_buffer_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 0 < self.max_chunk_bytes <= self.stream_buffer_bytes <= self.total_buffer_bytes:
            raise ValueError(
                "stream limits must be 0 < chunk <= per-operation buffer <= per-runner buffer"
            )
        if self.turn_budget_bytes < self.max_chunk_bytes:
            raise ValueError("the per-turn stream budget must hold at least one chunk")


@dataclass(frozen=True)
class Chunk:
    offset: int  # 1 for the first chunk of the stream
    data: bytes
    content_type: str
    emitted_at: float  # unix seconds


@dataclass(frozen=True)
class Refusal:
    """An emit refused to the executor: nothing was added, the turn goes on."""

    reason: str  # CHUNK_TOO_LARGE, STREAM_BUDGET_EXHAUSTED or STREAM_CLOSED
    message: str


@dataclass(frozen=True)
class Read:
    """What a reader gets after its cursor: a gap first if chunks it has not seen
    were dropped, then chunks in order; ``final_offset`` once it is at the end."""

    gap_next_offset: int | None  # set: offsets cursor+1 .. this-1 are lost
    chunks: tuple[Chunk, ...]
    final_offset: int | None  # set: the stream is closed and nothing more is left

    @property
    def cursor(self) -> int | None:
        """The last offset this read accounts for (None: it accounts for none)."""
        if self.chunks:
            return self.chunks[-1].offset
        if self.gap_next_offset is not None:
            return self.gap_next_offset - 1
        return None


class OutputStream:
    """One operation's stream (mutable; the shell serializes access)."""

    def __init__(self) -> None:
        self.next_offset = 1
        self.held: deque[Chunk] = deque()
        self.held_bytes = 0
        self.emitted_bytes = 0
        self.closed = False

    @property
    def final_offset(self) -> int:
        return self.next_offset - 1

    @property
    def first_held(self) -> int:
        return self.held[0].offset if self.held else self.next_offset

    def refusal(self, size: int, content_type: str, limits: StreamLimits) -> Refusal | None:
        """Why a chunk of ``size`` bytes would be refused now, or None."""
        if self.closed:
            return Refusal(STREAM_CLOSED, "the execution is over: its output stream is closed")
        if size > limits.max_chunk_bytes:
            return Refusal(
                CHUNK_TOO_LARGE,
                f"a chunk of {size} bytes is over the limit of {limits.max_chunk_bytes}",
            )
        if self.emitted_bytes + size > limits.turn_budget_bytes:
            return Refusal(
                STREAM_BUDGET_EXHAUSTED,
                f"the turn has emitted {self.emitted_bytes} bytes; another {size} would pass "
                f"its stream budget of {limits.turn_budget_bytes}",
            )
        if len(content_type) > MAX_CONTENT_TYPE_CHARS:
            return Refusal(CHUNK_TOO_LARGE, f"content_type over {MAX_CONTENT_TYPE_CHARS} chars")
        return None

    def append(
        self, data: bytes, content_type: str, at: float, limits: StreamLimits
    ) -> Chunk | Refusal:
        """Add a chunk (dropping this stream's oldest to stay within its buffer)."""
        refused = self.refusal(len(data), content_type, limits)
        if refused is not None:
            return refused
        chunk = Chunk(self.next_offset, data, content_type, at)
        self.next_offset += 1
        self.emitted_bytes += len(data)
        self.held.append(chunk)
        self.held_bytes += len(data)
        while self.held_bytes > limits.stream_buffer_bytes:
            self.drop_oldest()
        return chunk

    def drop_oldest(self) -> int:
        """Drop the oldest held chunk; the bytes freed (0 when none is held)."""
        if not self.held:
            return 0
        dropped = self.held.popleft()
        self.held_bytes -= len(dropped.data)
        return len(dropped.data)

    def read(self, after_offset: int, max_chunks: int) -> Read:
        """Up to ``max_chunks`` chunks after ``after_offset`` (see Read)."""
        wanted = after_offset + 1
        gap = None
        first = self.first_held
        if wanted < first:
            gap, wanted = first, first
        # Offsets are contiguous: the chunk for ``wanted`` sits at a known index.
        start = wanted - first
        chunks = tuple(itertools.islice(self.held, start, start + max_chunks))
        last = chunks[-1].offset if chunks else wanted - 1
        final = self.final_offset if self.closed and last >= self.final_offset else None
        return Read(gap, chunks, final)

    def close(self) -> int:
        """No more chunks; the final offset."""
        self.closed = True
        return self.final_offset


class OutputStreams:
    """Every operation's stream, under one total bound (mutable; the shell locks)."""

    def __init__(self, limits: StreamLimits) -> None:
        self.limits = limits
        self.streams: dict[str, OutputStream] = {}
        self._closed_order: OrderedDict[str, None] = OrderedDict()
        self.held_bytes = 0

    def open(self, key: str) -> OutputStream:
        """The stream for ``key``, new if there is none."""
        stream = self.streams.get(key)
        if stream is None:
            stream = self.streams[key] = OutputStream()
        return stream

    def emit(self, key: str, data: bytes, content_type: str, at: float) -> Chunk | Refusal:
        stream = self.streams.get(key)
        if stream is None:
            return Refusal(STREAM_CLOSED, "no output stream is open for this operation")
        before = stream.held_bytes
        result = stream.append(data, content_type, at, self.limits)
        self.held_bytes += stream.held_bytes - before
        self._evict()
        return result

    def read(self, key: str, after_offset: int, max_chunks: int) -> Read | None:
        """None when no stream is kept for ``key``."""
        stream = self.streams.get(key)
        return None if stream is None else stream.read(after_offset, max_chunks)

    def close(self, key: str) -> int | None:
        """Close the stream; its final offset (None when there is none)."""
        stream = self.streams.get(key)
        if stream is None:
            return None
        if not stream.closed:
            self._closed_order[key] = None
        return stream.close()

    def forget(self, key: str) -> None:
        stream = self.streams.pop(key, None)
        if stream is not None:
            self.held_bytes -= stream.held_bytes
        self._closed_order.pop(key, None)

    def _evict(self) -> None:
        while self.held_bytes > self.limits.total_buffer_bytes:
            victim = self._victim()
            if victim is None:  # pragma: no cover - held bytes always belong to a stream
                return
            self.held_bytes -= victim.drop_oldest()

    def _victim(self) -> OutputStream | None:
        for key in self._closed_order:  # settled turns' chunks first, oldest closed first
            stream = self.streams[key]
            if stream.held:
                return stream
        open_streams = [s for s in self.streams.values() if s.held]
        return max(open_streams, key=lambda s: s.held_bytes, default=None)
