"""In-process change notifications: who to wake when an operation changes.

The journal is the truth; this only shortens waits. Watchers re-read the
journal after every wake-up and also on a bounded timeout, so a missed
notification (or a change made by another replica) costs latency, never
correctness.

A watcher registers the operation it follows (``watching``) and waits for
*that* operation's version to move, so a commit wakes only the streams that
follow it into a journal read: with many open watches, one commit no longer
costs a read per watch (measured by bench/e2e.py).

Cancellation safety: no lock is shared between waiters. Each ``wait_past``
parks on a future of its own, registered under its operation and resolved by
``publish``, ``wake_all`` or its own timer; a waiter cancelled at any moment
(even as its timer fires) only unregisters itself. (The previous design held
an ``asyncio.Condition`` lock across ``asyncio.wait_for``; on Python 3.11 a
cancel landing while the timed-out inner wait re-acquired that lock left it
held with no owner and froze every later watch and the shutdown.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator


class ChangeFeed:
    def __init__(self) -> None:
        self._version = 0
        # Bumped by wake_all(): every waiter's mark includes it.
        self._epoch = 0
        # Per-operation versions, kept only while someone watches the operation.
        self._followed: dict[str, int] = {}
        self._followers: dict[str, int] = {}
        # The futures of the wait_past calls in progress, per operation; each
        # waiter removes its own on the way out, however it ends.
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}

    def publish(self, operation_id: str) -> None:
        """Record a committed change (called after a commit, from the event loop)."""
        self._version += 1
        if operation_id in self._followed:
            self._followed[operation_id] += 1
        _resolve_all(self._waiters.pop(operation_id, ()))

    def wake_all(self) -> None:
        """Wake every waiter now (shutdown: streams end instead of waiting a poll)."""
        self._version += 1
        self._epoch += 1
        waiters, self._waiters = self._waiters, {}
        for group in waiters.values():
            _resolve_all(group)

    @property
    def version(self) -> int:
        """Changes published so far, for any operation."""
        return self._version

    @property
    def waiting(self) -> int:
        """wait_past calls in progress (a cancelled one is never left behind)."""
        return sum(len(group) for group in self._waiters.values())

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
        ``at_most`` seconds. The caller must be inside ``watching(operation_id)``.

        Cancellable at any point: a cancel always propagates and leaves nothing
        registered, and no other waiter depends on this one.
        """
        if self.mark(operation_id) != mark or at_most <= 0:
            return
        # Checked and registered in one step (no await between): a publish
        # after the mark either moved it above or finds this future below.
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.setdefault(operation_id, set()).add(waiter)
        timer = loop.call_later(at_most, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            group = self._waiters.get(operation_id)
            if group is not None:
                group.discard(waiter)
                if not group:
                    del self._waiters[operation_id]


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _resolve_all(waiters: Iterable[asyncio.Future[None]]) -> None:
    for waiter in waiters:
        _resolve(waiter)
