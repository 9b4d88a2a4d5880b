"""In-process change notifications: who to wake when an operation changes.

The journal is the truth; this only shortens waits. Watchers re-read the
journal after every wake-up and also on a bounded timeout, so a missed
notification (or a change made by another replica) costs latency, never
correctness.

A watcher registers the operation it follows (``watching``) and waits for
*that* operation's version to move, so a commit wakes only the streams that
follow it into a journal read: with many open watches, one commit no longer
costs a read per watch (measured by bench/e2e.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class ChangeFeed:
    def __init__(self) -> None:
        self._version = 0
        # Bumped by wake_all(): every waiter's predicate includes it.
        self._epoch = 0
        # Per-operation versions, kept only while someone watches the operation.
        self._followed: dict[str, int] = {}
        self._followers: dict[str, int] = {}
        self._condition = asyncio.Condition()
        self._pending: set[asyncio.Task[None]] = set()

    def publish(self, operation_id: str) -> None:
        """Record a committed change (called after a commit, from the event loop)."""
        self._version += 1
        if operation_id in self._followed:
            self._followed[operation_id] += 1
            self._notify()

    def wake_all(self) -> None:
        """Wake every waiter now (shutdown: streams end instead of waiting a poll)."""
        self._version += 1
        self._epoch += 1
        self._notify()

    def _notify(self) -> None:
        async def notify() -> None:
            async with self._condition:
                self._condition.notify_all()

        # Keep a reference: the loop holds tasks weakly, and a collected
        # notification would leave a watcher waiting for its timeout.
        task = asyncio.get_running_loop().create_task(notify())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    @property
    def version(self) -> int:
        """Changes published so far, for any operation."""
        return self._version

    @contextlib.contextmanager
    def watching(self, operation_id: str) -> Iterator[None]:
        """Follow ``operation_id`` for the duration of the block."""
        self._followers[operation_id] = self._followers.get(operation_id, 0) + 1
        self._followed.setdefault(operation_id, 0)
        try:
            yield
        finally:
            self._followers[operation_id] -= 1
            if not self._followers[operation_id]:
                del self._followers[operation_id]
                del self._followed[operation_id]

    def mark(self, operation_id: str) -> tuple[int, int]:
        """The point to wait past; read it *before* reading the journal."""
        return (self._followed.get(operation_id, 0), self._epoch)

    async def wait_past(self, operation_id: str, mark: tuple[int, int], at_most: float) -> None:
        """Return once ``operation_id`` changed after ``mark`` (or wake_all), or after
        ``at_most`` seconds. The caller must be inside ``watching(operation_id)``."""

        def moved() -> bool:
            return (self._followed.get(operation_id, 0), self._epoch) != mark

        async with self._condition:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._condition.wait_for(moved), at_most)
