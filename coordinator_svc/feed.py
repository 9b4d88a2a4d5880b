"""In-process change notifications: who to wake when an operation changes.

The journal is the truth; this only shortens waits. Watchers re-read the
journal after every wake-up and also on a bounded timeout, so a missed
notification (or a change made by another replica) costs latency, never
correctness.
"""

from __future__ import annotations

import asyncio


class ChangeFeed:
    def __init__(self) -> None:
        self._version = 0
        self._condition = asyncio.Condition()
        self._pending: set[asyncio.Task[None]] = set()

    def publish(self, operation_id: str) -> None:
        """Wake every waiter (called after a commit, from the event loop)."""
        del operation_id  # waiters re-read the journal; the id is for future filtering
        self._version += 1
        loop_condition = self._condition

        async def _notify() -> None:
            async with loop_condition:
                loop_condition.notify_all()

        # Keep a reference: the loop holds tasks weakly, and a collected
        # notification would leave a watcher waiting for its timeout.
        task = asyncio.get_running_loop().create_task(_notify())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    @property
    def version(self) -> int:
        return self._version

    async def wait_past(self, version: int, at_most: float) -> None:
        """Return once a change after ``version`` was published, or after ``at_most`` s."""
        async with self._condition:
            try:
                await asyncio.wait_for(
                    self._condition.wait_for(lambda: self._version > version), at_most
                )
            except TimeoutError:
                return
