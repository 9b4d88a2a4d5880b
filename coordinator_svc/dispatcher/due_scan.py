"""The due scan: the fallback for timers lost to a restart or a race.

Every ``idle_poll`` seconds the engine asks the journal for operations whose
``next_action_at`` has passed and ticks those nothing else is looking after
(``skip``: a timer still waiting, a Dispatch reply on the way, a turn held by
the scheduler or being routed). QUEUED turns wait in memory (held, or ticked
at their backoff); a backlog of them must not crowd out the rest, so they are
looked for only every ``DISCOVERY_EVERY`` scans (turns another replica
accepted, anything missed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from coordinator_svc.core.model import OperationRecord
from coordinator_svc.ports import Journal, JournalError

log = logging.getLogger("coordinator_svc.dispatcher")

DISCOVERY_EVERY = 20
SCAN_LIMIT = 512


class DueScan:
    def __init__(
        self,
        journal: Journal,
        clock: Callable[[], datetime],
        every: float,
        skip: Callable[[OperationRecord, datetime], bool],
        tick: Callable[[str], None],
    ) -> None:
        self._journal = journal
        self._clock = clock
        self._every = every
        self._skip = skip
        self._tick = tick
        self._scans = 0

    async def run(self, running: Callable[[], bool]) -> None:
        """Scan, then sleep ``every`` seconds, while ``running()``."""
        while running():
            try:
                await self.scan()
            except JournalError as error:
                log.warning("due scan failed: %s", error)
            await asyncio.sleep(self._every)

    async def scan(self) -> None:
        now = self._clock()
        self._scans += 1
        discover = self._scans % DISCOVERY_EVERY == 0
        for record in await self._journal.due(now, SCAN_LIMIT, queued=discover):
            if not self._skip(record, now):
                self._tick(record.operation_id)
