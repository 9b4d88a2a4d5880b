"""The coordinator's bounded buffer of one operation's relayed output (PROTOCOL.md §12), pure.

One upstream reader (the runner's StreamOutput, R13) fills it; any number of
watchers read it, each with its own cursor (S5, S6). It holds one contiguous
run of offsets, at most ``limit_bytes`` of chunk data: taking a chunk past the
limit drops the oldest (S5). A reader whose next offset is no longer held is
told so first (a *gap*: ``after_offset`` its cursor, ``next_offset`` the first
offset still to come), never a silent hole (S5, S6).

The buffer learns how the stream ends from upstream: the runner's end
(``final_offset``: the reader that reaches it saw the whole stream), or the
relay giving up (the runner no longer holds the stream, or cannot be reached
once the turn is over): then a reader that has read everything held is told a
gap with ``next_offset`` 0, "the rest could not be relayed" (S4, S7).

No I/O, no clock, no asyncio: ``coordinator_svc.dispatcher.output_relay`` adds
the upstream stream, the wake-ups and the buffer's life. Chunks are opaque
here (the shell's wire messages, relayed as they came): the buffer needs only
each one's offset and size.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from coordinator_svc.core.model import Execution, OperationRecord, OpState

_C = TypeVar("_C")
# OutputGap.next_offset when the relay could not learn how many chunks remain.
REST_UNKNOWN = 0
# Once the turn is terminal, this many failed reads in a row and the relay gives up (S4).
TRIES_AFTER_THE_END = 3


class RelayStep(enum.Enum):
    """What the upstream does next for an operation (S5)."""

    WAIT = "wait"  # not bound to a runner yet: wait for a change
    READ = "read"  # open (or reopen) the bound runner's StreamOutput
    NO_OUTPUT = "no output"  # it ended without running: the stream is empty
    GIVE_UP = "give up"  # nothing more can be learned: readers are told (S4)


def relay_step(record: OperationRecord | None, failures: int) -> RelayStep:
    """S4, S5: the upstream's next step, from the operation's row as the API reads it
    and how many reads in a row added nothing."""
    if record is None:
        return RelayStep.GIVE_UP
    if record.state.terminal and record.execution is Execution.NOT_STARTED:
        return RelayStep.NO_OUTPUT
    if record.runner is None or record.state is OpState.QUEUED:
        return RelayStep.NO_OUTPUT if record.state.terminal else RelayStep.WAIT
    if record.state.terminal and failures >= TRIES_AFTER_THE_END:
        return RelayStep.GIVE_UP
    return RelayStep.READ


@dataclass(frozen=True)
class Gap:
    """Offsets after ``after_offset`` and before ``next_offset`` are lost to this
    reader (``next_offset`` REST_UNKNOWN: every offset after ``after_offset``)."""

    after_offset: int
    next_offset: int


@dataclass(frozen=True)
class RelayRead(Generic[_C]):
    """What a reader gets after its cursor: a gap first if chunks it has not seen are
    gone, then chunks in offset order; ``done`` once nothing more will come to it."""

    gap: Gap | None
    chunks: tuple[_C, ...]
    cursor: int  # the last offset this read accounts for
    done: bool
    # A gap after the chunks: the relay gave up, the rest is lost to this reader.
    lost_rest: Gap | None = None


class RelayBuffer(Generic[_C]):
    """One operation's relayed chunks (mutable; the shell runs it on one event loop)."""

    def __init__(self, limit_bytes: int) -> None:
        if limit_bytes <= 0:
            raise ValueError("the relay buffer must hold at least one byte")
        self.limit_bytes = limit_bytes
        self._held: deque[tuple[int, int, _C]] = deque()  # (offset, size, chunk)
        self.held_bytes = 0
        # The offset upstream sends next; the cursor to reopen upstream from is this - 1.
        self.next_offset = 1
        self.final_offset: int | None = None
        self.gave_up = False
        self.dropped = 0  # chunks dropped here to stay within the limit (S5)

    @property
    def upstream_cursor(self) -> int:
        """The offset to reopen the runner's stream after (R13's after_offset)."""
        return self.next_offset - 1

    @property
    def first_held(self) -> int:
        return self._held[0][0] if self._held else self.next_offset

    @property
    def ended(self) -> bool:
        """Nothing more will be added: the runner's end was seen, or the relay gave up."""
        return self.final_offset is not None or self.gave_up

    def add(self, offset: int, size: int, chunk: _C) -> bool:
        """A chunk from upstream; False (ignored) unless it is the one expected next."""
        if self.ended or offset != self.next_offset:
            return False  # a repeat after a reopen: upstream resumes from our cursor
        self._held.append((offset, size, chunk))
        self.held_bytes += size
        self.next_offset = offset + 1
        # The newest chunk always stays, even alone over the limit: a reader gets it.
        while self.held_bytes > self.limit_bytes and len(self._held) > 1:
            self._drop_oldest()
        return True

    def skip_to(self, next_offset: int) -> None:
        """Upstream's gap: offsets before ``next_offset`` are gone at the runner. What is
        held stays readable only while it is contiguous with what comes next, so it goes."""
        if self.ended or next_offset <= self.next_offset:
            return
        while self._held:
            self._drop_oldest()
        self.next_offset = next_offset

    def end(self, final_offset: int) -> None:
        """The runner's end: the execution's last chunk is ``final_offset``."""
        if self.ended:
            return
        if final_offset >= self.next_offset:  # its last chunks never reached us
            self.skip_to(final_offset + 1)
        self.final_offset = final_offset

    def give_up(self) -> None:
        """The rest of the stream cannot be relayed (S4): readers are told at its end."""
        if not self.ended:
            self.gave_up = True

    def read(self, after_offset: int, max_chunks: int) -> RelayRead[_C]:
        """Up to ``max_chunks`` chunks after ``after_offset`` (see RelayRead)."""
        wanted = after_offset + 1
        first = self.first_held
        gap = None
        if wanted < first:
            gap, wanted = Gap(after_offset, first), first
        start = wanted - first
        chunks = tuple(c for _, _, c in itertools.islice(self._held, start, start + max_chunks))
        cursor = wanted - 1 + len(chunks)
        done, lost = False, None
        if self.final_offset is not None:
            done = cursor >= self.final_offset
        elif self.gave_up and cursor >= self.next_offset - 1:
            done, lost = True, Gap(cursor, REST_UNKNOWN)
        return RelayRead(gap, chunks, cursor, done, lost)

    def _drop_oldest(self) -> None:
        _, size, _ = self._held.popleft()
        self.held_bytes -= size
        self.dropped += 1
