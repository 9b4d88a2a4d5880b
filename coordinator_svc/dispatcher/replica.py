"""What the dispatcher does differently as one replica of several (§5, issue 12).

- **Its own leases only.** Before a step, ``take`` answers whether this
  replica may drive the operation: its own lease (and its leases are current,
  ``Ownership.check_current``), or another owner's lapsed lease, which it
  adopts: a claim (the fencing token moves on), then C12's ``Restarted``
  (DISPATCHING becomes DISPATCH_UNKNOWN: a Dispatch may have left the old
  owner; it is reconciled, never sent blindly again), then the step itself.
  Anything else is another replica's: no step.
- **A client's cancel on any replica.** CancelOperation may arrive at a
  replica that does not hold the lease: it stores the request only
  (``decide_cancel.mark_requested``, no command) and the owner, whose due
  scan sees the row due now, sends the Cancel.
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

from coordinator_svc.core.decide import decide
from coordinator_svc.core.decide_cancel import mark_requested
from coordinator_svc.core.decision import Decision
from coordinator_svc.core.events import CancelRequested, Event, Restarted
from coordinator_svc.core.model import AttemptRecord, OperationRecord, OpState
from coordinator_svc.core.ownership import Role, role
from coordinator_svc.dispatcher.ownership import Ownership
from coordinator_svc.ports import JournalError, StaleVersion

if TYPE_CHECKING:
    from coordinator_svc.dispatcher.engine import Dispatcher

log = logging.getLogger("coordinator_svc.ownership")

# States in which a cancel stored by another replica waits for the owner to act.
CANCEL_MARKED_STATES = (OpState.QUEUED, OpState.RUNNING, OpState.DISPATCH_UNKNOWN)
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

    async def take(
        self, record: OperationRecord, event: Event
    ) -> OperationRecord | Decision | None:
        """The record to step (adopted first if it was an orphan), a cancel mark
        to commit as it is (another replica's operation), or None (not ours)."""
        own = self.ownership
        own.check_current()  # raises LeasesNotCurrent: the drive backs off
        now = self._dispatcher._clock()
        match role(record, own.owner, now, cancel=isinstance(event, CancelRequested)):
            case Role.OWNER:
                return record
            case Role.ADOPTER:
                return await self._adopt(record)
            case Role.CANCEL_MARK:
                return self._cancel_mark(record)
            case Role.BYSTANDER:
                return None

    def _cancel_mark(self, record: OperationRecord) -> Decision:
        context = dataclasses.replace(self._dispatcher._context((), record), replica_id="")
        return mark_requested(record, context)

    async def _adopt(self, record: OperationRecord) -> OperationRecord | None:
        d = self._dispatcher
        claimed = await self.ownership.claim(record.operation_id)
        if claimed is None:
            return None  # another replica took it first, or is writing it now
        self.ownership.adopted += 1
        log.info(
            "%s: adopted from %s (%s, fencing token %d)",
            record.operation_id,
            record.lease_owner or "no owner",
            claimed.state.value,
            claimed.fencing_token,
        )
        current = claimed
        for _ in range(ADOPT_RETRIES):
            attempts: tuple[AttemptRecord, ...] = ()
            if current.attempt_count:
                attempts = tuple(await d._journal.attempts(current.operation_id))
            decision = decide(current, Restarted(), d._context(attempts, current))
            if decision.change is None:
                break
            try:
                stored = await d._journal.commit(decision.change)
            except StaleVersion:
                # A cancel mark landed between the claim and this commit: read again.
                reread = await d._journal.get(current.operation_id)
                if reread is None or not self.owns(reread):
                    return None
                current = reread
                continue
            d._committed(current, stored, decision)
            current = stored
            break
        d.room.committed(current)
        if d.room.scheduler.follow(current, routing=False):
            d._pump()
        return current

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
