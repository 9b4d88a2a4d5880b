"""What the dispatcher does differently as one replica of several (§5, issue 12).

- **Its own leases only.** Who may drive an operation (its owner, an adopter
  of a lapsed lease, a replica storing a client's cancel for the owner) is
  decided in each step by the driver (``coordinator_svc.driver.step``); the
  owner, whose due scan sees a marked row due now, sends the Cancel.
- **Upkeep.** ``keep_leases`` renews this replica's leases every quarter TTL
  and adopts the orphans it finds (a page per round, oldest first).
- **Acceptance.** A new operation is stored with this replica's lease.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from coordinator_svc.core.model import OperationRecord
from coordinator_svc.dispatcher.ownership import Ownership
from coordinator_svc.driver.inputs import Input, LookAgain
from coordinator_svc.ports import JournalError

log = logging.getLogger("coordinator_svc.ownership")


class ReplicaDuties:
    """``feed``: the engine's one entry point (an orphan found: look at it now)."""

    def __init__(
        self,
        ownership: Ownership,
        clock: Callable[[], datetime],
        feed: Callable[[Input], Awaitable[None]],
    ) -> None:
        self.ownership = ownership
        self._clock = clock
        self._feed = feed

    def owns(self, record: OperationRecord) -> bool:
        return self.ownership.owns(record)

    def leased(self, record: OperationRecord) -> OperationRecord:
        """A new operation as this replica stores it: under its own lease."""
        own = self.ownership
        own.check_current()
        now = self._clock()
        return dataclasses.replace(
            record, lease_owner=own.owner, lease_expires_at=now + timedelta(seconds=own.ttl)
        )

    async def keep_leases(self, running: Callable[[], bool]) -> None:
        """Renew, then adopt the orphans found, every quarter TTL, while ``running()``."""
        own = self.ownership
        while running():
            own.note_lapse()  # before renewing: a process that was paused says so once
            await own.renew()
            if own.current():
                try:
                    for record in await own.orphans():
                        await self._feed(LookAgain(record.operation_id))
                except JournalError as error:
                    log.warning("replica %s: orphan scan failed: %s", own.owner, error)
            await asyncio.sleep(own.settings.renew_every)
