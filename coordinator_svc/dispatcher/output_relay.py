"""Streamed output relayed to the clients watching an operation (PROTOCOL.md §12).

One upstream per operation per coordinator process, however many watchers
(S5): the first watcher that asks opens it, a task that follows the
operation's row until it is bound to a runner, then reads the runner's
StreamOutput (R13) through this process's own channel and credentials to that
runner into one bounded ``RelayBuffer`` (core/relay_buffer.py). Every watcher
reads that buffer with its own cursor: a slow one only falls behind (and is
told the gap when the buffer drops what it has not read, S6), never holds up
the upstream or another watcher; no watcher ever waits on another's socket.

A replica that does not own the operation relays it the same way (S8): its
own upstream to the bound runner (runners serve any number of readers), so
the cost is one runner stream per replica per watched operation.

Nothing here is durable (S4): the buffer lives in this process's memory.
After a restart a watcher resumes by offset from the runner while the runner
still holds the chunks, else it is told a gap; the terminal event's result is
the truth either way. The buffer is forgotten ``linger_seconds`` after its
last watcher left (so a watcher that reconnects at once resumes from it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import grpc

from coordinator_svc.config import DEFAULT_RELAY_BUFFER_BYTES
from coordinator_svc.core.model import OperationRecord
from coordinator_svc.core.relay_buffer import RelayBuffer, RelayRead, RelayStep, relay_step
from coordinator_svc.dispatcher.runner_client import describe
from coordinator_svc.feed import ChangeFeed
from coordinator_svc.ports import OutputCall
from turnwire.common.v1 import turn_pb2

log = logging.getLogger("coordinator_svc.dispatcher.relay")

DEFAULT_BUFFER_BYTES = DEFAULT_RELAY_BUFFER_BYTES
# Retries while the runner has not admitted the turn yet (its stream opens at
# admission, R13) or the stream was cut: short at first, so the first chunks
# are not late; at most RETRY_MAX_SECONDS apart.
RETRY_FIRST_SECONDS = 0.02
RETRY_MAX_SECONDS = 0.25
# How long a row not yet bound is waited on between looks (the feed wakes it sooner).
BIND_POLL_SECONDS = 0.5


class OutputSource(Protocol):
    """A runner that serves StreamOutput (``RunnerClient``)."""

    def stream_output(self, operation_id: str, after_offset: int) -> OutputCall: ...


Chunk = turn_pb2.OutputChunk


@dataclass
class _Entry:
    buffer: RelayBuffer[Chunk]
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    watchers: int = 0
    task: asyncio.Task[None] | None = None
    forget: asyncio.TimerHandle | None = None


class Subscription:
    """One watcher's view of an operation's relayed output (its cursor is its own)."""

    def __init__(self, entry: _Entry) -> None:
        self._entry = entry

    def changed(self) -> asyncio.Event:
        """Set when something was added after this call; take it *before* ``read``."""
        event = self._entry.changed
        if event.is_set():  # a fresh one per wave: waiters of the last one were woken
            event = self._entry.changed = asyncio.Event()
        return event

    def read(self, after_offset: int, max_chunks: int) -> RelayRead[Chunk]:
        return self._entry.buffer.read(after_offset, max_chunks)

    @property
    def ended(self) -> bool:
        return self._entry.buffer.ended


class OutputRelay:
    """Every relayed operation of this coordinator process (S5)."""

    def __init__(
        self,
        *,
        source: Callable[[str], OutputSource | None],
        locate: Callable[[str], Awaitable[OperationRecord | None]],
        feed: ChangeFeed,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        linger_seconds: float = 10.0,
    ) -> None:
        """``source(runner)``: this process's client of that runner (None: not a
        member); ``locate(operation_id)``: the operation's row as the API reads it."""
        self._source = source
        self._locate = locate
        self._feed = feed
        self.buffer_bytes = buffer_bytes
        self._linger = linger_seconds
        self._entries: dict[str, _Entry] = {}
        # Upstreams started (one per operation while it has a buffer, S5) and the
        # StreamOutput calls they made (more than one after a cut or a retry).
        self.upstreams = 0
        self.stream_calls = 0

    @property
    def relayed(self) -> int:
        """Operations with a buffer now."""
        return len(self._entries)

    @contextlib.contextmanager
    def subscribe(self, operation_id: str) -> Iterator[Subscription]:
        """Watch ``operation_id``'s output for the duration of the block (S5)."""
        entry = self._entries.get(operation_id)
        if entry is None:
            entry = self._entries[operation_id] = _Entry(RelayBuffer(self.buffer_bytes))
        if entry.forget is not None:
            entry.forget.cancel()
            entry.forget = None
        if entry.task is None:
            self.upstreams += 1
            entry.task = asyncio.get_running_loop().create_task(
                self._follow(operation_id, entry), name=f"relay {operation_id}"
            )
        entry.watchers += 1
        try:
            yield Subscription(entry)
        finally:
            entry.watchers -= 1
            if not entry.watchers:
                loop = asyncio.get_running_loop()
                entry.forget = loop.call_later(self._linger, self._drop, operation_id, entry)

    def close(self) -> None:
        """Stop every upstream (the coordinator is stopping)."""
        for operation_id, entry in list(self._entries.items()):
            self._drop(operation_id, entry)

    def _drop(self, operation_id: str, entry: _Entry) -> None:
        if entry.watchers and entry.forget is not None:
            return  # pragma: no cover - a subscribe cancels the timer first
        if self._entries.get(operation_id) is entry:
            del self._entries[operation_id]
        if entry.forget is not None:
            entry.forget.cancel()
        if entry.task is not None:
            entry.task.cancel()
        entry.buffer.give_up()
        entry.changed.set()

    async def _follow(self, operation_id: str, entry: _Entry) -> None:
        """The upstream: wait for a bound runner, then read its stream into the buffer
        until the runner's end, reopening from the buffer's cursor after a cut (S7);
        what to do next is ``core.relay_buffer.relay_step``'s."""
        buffer, failures, pause = entry.buffer, 0, RETRY_FIRST_SECONDS
        try:
            with self._feed.watching(operation_id):
                while not buffer.ended:
                    mark = self._feed.mark(operation_id)
                    record = await self._locate(operation_id)
                    step = relay_step(record, failures)
                    if step is RelayStep.NO_OUTPUT:
                        buffer.end(0)
                    if step in (RelayStep.NO_OUTPUT, RelayStep.GIVE_UP):
                        break
                    if step is RelayStep.WAIT:
                        await self._feed.wait_past(operation_id, mark, BIND_POLL_SECONDS)
                        continue
                    assert record is not None and record.runner is not None
                    source = self._source(record.runner)
                    if source is None:
                        log.info("%s: runner %s is not a member here", operation_id, record.runner)
                        break
                    progressed = await self._read(operation_id, record, source, entry)
                    failures = 0 if progressed else failures + 1
                    pause = RETRY_FIRST_SECONDS if progressed else min(pause * 2, RETRY_MAX_SECONDS)
                    if not buffer.ended:
                        await self._feed.wait_past(operation_id, mark, pause)
        except asyncio.CancelledError:
            raise
        except Exception:  # e.g. the journal is unavailable: the watchers are told a gap
            log.exception("%s: output relay failed", operation_id)
        finally:
            buffer.give_up()
            entry.changed.set()

    async def _read(
        self, operation_id: str, record: OperationRecord, source: OutputSource, entry: _Entry
    ) -> bool:
        """One StreamOutput call from the buffer's cursor; True if it added anything."""
        buffer, progressed = entry.buffer, False
        self.stream_calls += 1
        call = source.stream_output(operation_id, buffer.upstream_cursor)
        try:
            async for message in call:
                if record.incarnation_id and message.incarnation_id != record.incarnation_id:
                    # Another incarnation's chunks are not this execution's (R13).
                    return progressed
                kind = message.WhichOneof("item")
                if kind == "chunk":
                    chunk = message.chunk
                    progressed |= buffer.add(chunk.offset, len(chunk.data), chunk)
                elif kind == "gap":
                    buffer.skip_to(message.gap.next_offset)
                    progressed = True
                elif kind == "end":
                    buffer.end(message.end.final_offset)
                    progressed = True
                entry.changed.set()
        except grpc.aio.AioRpcError as error:
            log.debug("%s: output stream from %s: %s", operation_id, record.runner, describe(error))
        finally:
            call.cancel()
        return progressed
