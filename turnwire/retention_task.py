"""The scheduled retention pass both services run (issue 12, PROTOCOL.md §9).

It logs alike for both:

- one INFO line per run that deleted something (what, how many, how long),
  nothing for a run that found nothing (a quiet journal stays a quiet log);
- one WARNING per run that failed. A pass deletes in bounded batches, each its
  own transaction, so a failed batch rolled back whole: the batches before it
  stand, nothing is half deleted, and the next run starts again from the data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from turnwire.retention import PruneReport

# A pass: given "may I go on?" (asked between batches), what it deleted.
PrunePass = Callable[[Callable[[], bool]], Awaitable[PruneReport]]


class ScheduledPrune:
    """Runs a pass now and then every ``interval`` seconds until ``stop()``.

    ``stop()`` never interrupts a batch: it asks the pass to end after the one
    in progress (a batch runs in a worker thread, and cancelling its awaiter
    would leave its transaction running behind a closed store), then waits."""

    def __init__(self, name: str, run: PrunePass, interval: float, log: logging.Logger) -> None:
        self.name = name
        self._run = run
        self._interval = interval
        self._log = log
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.runs = 0
        self.failures = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            await self.run_once()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._stopping.wait()

    async def run_once(self) -> PruneReport | None:
        """One pass, logged: the report, or None if it failed (logged as a WARNING)."""
        started = time.monotonic()
        self.runs += 1
        try:
            report = await self._run(lambda: not self._stopping.is_set())
        except Exception as exc:  # any failure: the batch rolled back; try again next run
            self.failures += 1
            self._log.warning(
                "%s: prune failed after %.3f s; its batch rolled back, nothing of it is "
                "deleted (the next run tries again): %s",
                self.name,
                time.monotonic() - started,
                exc,
            )
            return None
        if report.pruned:
            self._log.info("%s: pruned %s", self.name, report.summary())
        return report

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            task, self._task = self._task, None
            await asyncio.gather(task, return_exceptions=True)
