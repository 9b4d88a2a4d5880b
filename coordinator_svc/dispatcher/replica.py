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
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from coordinator_svc.core.model import OperationRecord
from coordinator_svc.dispatcher.ownership import Ownership
from coordinator_svc.ports import JournalError

if TYPE_CHECKING:
    from coordinator_svc.dispatcher.engine import Dispatcher

log = logging.getLogger("coordinator_svc.ownership")

ADOPT_RETRIES = 4


class ReplicaDuties:
    def __init__(self, dispatcher: Dispatcher) -> None:
        ownership = dispatcher._ownership
        assert ownership is not None
        self.ownership: Ownership = ownership
        self._dispatcher = dispatcher

    def owns(self, record: OperationRecord) -> bool:
        return self.ownership.owns(record)

    def leased(self, record: OperationRecord) -> OperationRecord:
        """A new operation as this replica stores it: under its own lease."""
        own = self.ownership
        own.check_current()
        now = self._dispatcher._clock()
        return dataclasses.replace(
            record, lease_owner=own.owner, lease_expires_at=now + timedelta(seconds=own.ttl)
        )

    async def keep_leases(self, running: Callable[[], bool]) -> None:
        """Renew, then adopt the orphans found, every quarter TTL, while ``running()``."""
        own = self.ownership
        d = self._dispatcher
        while running():
            own.note_lapse()  # before renewing: a process that was paused says so once
            await own.renew()
            if own.current():
                try:
                    for record in await own.orphans():
                        d.wake(record.operation_id)
                except JournalError as error:
                    log.warning("replica %s: orphan scan failed: %s", own.owner, error)
            await asyncio.sleep(own.settings.renew_every)
