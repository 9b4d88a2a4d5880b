"""The runner's output streams (PROTOCOL.md R13): emit from any thread, read on the loop.

The streams themselves are turnwire.output_stream's pure ``OutputStreams``;
this shell adds what it leaves out:

- a lock, since ``emit`` comes from executor threads as well as the loop;
- wake-ups for readers waiting on the event loop, coalesced (at most one
  scheduled per operation however fast chunks come), so an emit never waits
  for, or is slowed by, a reader;
- a stream's life: opened when its job is admitted, closed when the
  execution is over (its final offset goes on the settlement), *ended* when
  the job's run is over (its row settled, or held unsaved, R7), and forgotten
  ``keep_seconds`` after that, when its settled row's ``output_chunks`` is all
  a reader can still learn.

Nothing here is durable: a runner that dies loses every chunk it held; the
settled row (its result, and how many chunks there were) is the truth.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Protocol

from turnwire.executor.outcomes import OutputRefused
from turnwire.output_stream import OutputStreams, Read, Refusal, StreamLimits


class OutputHub:
    """Every operation's output stream on this runner."""

    def __init__(
        self,
        limits: StreamLimits,
        *,
        keep_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.limits = limits
        self._keep_seconds = keep_seconds
        self._clock = clock
        self._streams = OutputStreams(limits)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: dict[str, asyncio.Event] = {}  # touched on the loop only
        self._wake_scheduled: set[str] = set()
        self._ended: set[str] = set()
        self._forget_timers: dict[str, asyncio.TimerHandle] = {}

    # --- the job's side (event loop) ---------------------------------------------------

    def open(self, operation_id: str) -> None:
        """A job was admitted: its stream exists from now (and a reader can wait on it)."""
        self._loop = asyncio.get_running_loop()
        with self._lock:
            self._streams.open(operation_id)

    def close(self, operation_id: str) -> int:
        """The execution is over: no more chunks. Its final offset (0: none emitted)."""
        with self._lock:
            final = self._streams.close(operation_id) or 0
        self._wake(operation_id)
        return final

    def end(self, operation_id: str) -> None:
        """The job's run is over: readers get their end; forgotten after keep_seconds."""
        with self._lock:
            self._streams.close(operation_id)
            self._ended.add(operation_id)
        self._wake(operation_id)
        loop = asyncio.get_running_loop()
        self._forget_timers[operation_id] = loop.call_later(
            self._keep_seconds, self._forget, operation_id
        )

    def stop(self) -> None:
        """The runner is stopping: wake every reader (they end), cancel the timers."""
        for timer in self._forget_timers.values():
            timer.cancel()
        self._forget_timers.clear()
        for operation_id in list(self._changed):
            self._wake(operation_id)

    # --- the executor's side (any thread) -------------------------------------------

    def emit(self, operation_id: str, data: bytes, content_type: str) -> int:
        """Add a chunk; its offset. Raises OutputRefused (the turn goes on)."""
        with self._lock:
            added = self._streams.emit(operation_id, data, content_type, self._clock())
            wake = operation_id in self._changed and operation_id not in self._wake_scheduled
            if wake:
                self._wake_scheduled.add(operation_id)
        if isinstance(added, Refusal):
            raise OutputRefused(added.reason, added.message)
        if wake and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody reads
                self._loop.call_soon_threadsafe(self._wake, operation_id)
        return added.offset

    # --- the readers' side (event loop) ------------------------------------------------

    def held(self, operation_id: str) -> bool:
        with self._lock:
            return operation_id in self._streams.streams

    def changed(self, operation_id: str) -> asyncio.Event:
        """Set at the next change of the stream; take it *before* reading, so a
        change between the read and the wait is never missed."""
        with self._lock:
            event = self._changed.get(operation_id)
            if event is None:
                event = self._changed[operation_id] = asyncio.Event()
            return event

    def read(
        self, operation_id: str, after_offset: int, max_chunks: int
    ) -> tuple[Read, bool] | None:
        """What is held after the cursor, and whether the job's run is over; None
        once the stream is forgotten (or was never held here)."""
        with self._lock:
            read = self._streams.read(operation_id, after_offset, max_chunks)
            return None if read is None else (read, operation_id in self._ended)

    @property
    def held_bytes(self) -> int:
        with self._lock:
            return self._streams.held_bytes

    def _wake(self, operation_id: str) -> None:
        with self._lock:
            self._wake_scheduled.discard(operation_id)
            event = self._changed.pop(operation_id, None)
        if event is not None:
            event.set()

    def _forget(self, operation_id: str) -> None:
        self._forget_timers.pop(operation_id, None)
        with self._lock:
            self._streams.forget(operation_id)
            self._ended.discard(operation_id)
        self._wake(operation_id)


class Stamped(Protocol):
    """A job as its channel sees it: which operation, and where its stamp goes."""

    operation_id: str
    last_heartbeat: float | None


class JobChannel:
    """What one job's executor sends back while it runs: chunks to the job's output
    stream (R13), heartbeats to the job (R12). Safe from any thread; never blocks."""

    def __init__(self, job: Stamped, hub: OutputHub, clock: Callable[[], float]) -> None:
        self._job = job
        self._hub = hub
        self._clock = clock

    def emit(self, data: bytes, content_type: str) -> int:
        self._job.last_heartbeat = self._clock()  # a chunk is a sign of life
        return self._hub.emit(self._job.operation_id, data, content_type)

    def heartbeat(self) -> None:
        self._job.last_heartbeat = self._clock()
