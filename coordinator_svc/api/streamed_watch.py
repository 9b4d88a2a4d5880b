"""A watch's events with the operation's relayed output between them (PROTOCOL.md §12).

``with_output`` merges two sources into one response stream: the watch's
events (the journal's, as WatchOperation sends them) and the operation's
chunks from the coordinator's relay buffer (``dispatcher.output_relay``), read
with this watcher's own cursor. Chunks go out in offset order as they arrive
(S2); a gap is said where this watcher's next chunk is gone (S5, S6). When the
terminal event comes it is held back until the chunks up to the runner's
final offset went out, for at most ``drain_seconds`` (S3); if the relay could
not learn the end in that time, a gap with next_offset 0 says the rest was
not relayed, then the terminal event goes (its result is the truth, S4).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from coordinator_svc.core.relay_buffer import REST_UNKNOWN, Gap
from coordinator_svc.dispatcher.output_relay import Subscription
from turnwire.common.v1 import turn_pb2

_T = TypeVar("_T")
# Chunks taken per look at the buffer (a long backlog yields the loop between).
READ_BATCH = 64
DEFAULT_DRAIN_SECONDS = 2.0


async def with_output(
    events: AsyncIterator[_T],
    output: Subscription,
    after_offset: int,
    *,
    chunk: Callable[[turn_pb2.OutputChunk], _T],
    gap: Callable[[turn_pb2.OutputGap], _T],
    terminal: Callable[[_T], bool],
    drain_seconds: float = DEFAULT_DRAIN_SECONDS,
) -> AsyncIterator[_T]:
    """``events`` as they come, with every chunk after ``after_offset`` sent between
    them and before the terminal one (S2, S3)."""
    cursor = after_offset
    done = False  # this watcher has seen the end of the output

    def sent(read_gap: Gap) -> _T:
        return gap(
            turn_pb2.OutputGap(after_offset=read_gap.after_offset, next_offset=read_gap.next_offset)
        )

    async def drain_into(out: list[_T]) -> bool:
        """What the buffer holds for this watcher into ``out``; True if it added any."""
        nonlocal cursor, done
        read = output.read(cursor, READ_BATCH)
        if read.gap is not None:
            out.append(sent(read.gap))
        out.extend(chunk(c) for c in read.chunks)
        if read.lost_rest is not None:
            out.append(sent(read.lost_rest))
        cursor, done = read.cursor, read.done
        return bool(out)

    pending: asyncio.Future[_T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(events))
            changed = output.changed()  # before the read: no lost wake-up
            out: list[_T] = []
            if not done and await drain_into(out):
                for message in out:
                    yield message
                await asyncio.sleep(0)
                continue
            waiting: asyncio.Future[Any] = asyncio.ensure_future(changed.wait())
            try:
                both: set[asyncio.Future[Any]] = {pending, waiting}
                await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()
            if not pending.done():
                continue
            try:
                response = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            if terminal(response) and not done:
                async for message in _the_rest(output, cursor, drain_seconds, sent, chunk):
                    yield message
                done = True
            yield response
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


async def _the_rest(
    output: Subscription,
    cursor: int,
    drain_seconds: float,
    sent: Callable[[Gap], _T],
    chunk: Callable[[turn_pb2.OutputChunk], _T],
) -> AsyncIterator[_T]:
    """S3: the chunks still to come up to the final offset, within ``drain_seconds``;
    if the end is not known by then, a gap says the rest was not relayed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + drain_seconds
    while True:
        changed = output.changed()
        read = output.read(cursor, READ_BATCH)
        if read.gap is not None:
            yield sent(read.gap)
        for c in read.chunks:
            yield chunk(c)
        if read.lost_rest is not None:
            yield sent(read.lost_rest)
        cursor = read.cursor
        if read.done:
            return
        if read.chunks or read.gap is not None:
            continue
        left = deadline - loop.time()
        if left <= 0:
            yield sent(Gap(cursor, REST_UNKNOWN))
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left):
                await changed.wait()
