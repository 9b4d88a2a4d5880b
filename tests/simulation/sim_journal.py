"""The coordinator's journal in memory, with the Journal port's write rules.

Every write goes through ``coordinator_svc.storage.rules`` (legal edges, C13
bookkeeping, frozen terminal outcome fields) and is a compare-and-set on
(version, fencing_token), exactly as ``storage.fake.FakeJournal``, but
synchronous so a simulation step is one atomic transaction.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from coordinator_svc.core.model import AttemptRecord, Change, EventRecord, OperationRecord
from coordinator_svc.core.ownership import is_open, lease_live
from coordinator_svc.ports import LeaseLost, StaleVersion
from coordinator_svc.storage import rules


@dataclass
class SimJournal:
    """The Journal port's write semantics, synchronously (see storage.fake)."""

    operations: dict[str, OperationRecord] = field(default_factory=dict)
    attempts: dict[str, dict[int, AttemptRecord]] = field(default_factory=dict)
    events: dict[str, list[EventRecord]] = field(default_factory=dict)

    def submit(self, record: OperationRecord, first: EventRecord) -> OperationRecord:
        stored, event = rules.prepare_submit(record, first)
        self.operations[stored.operation_id] = stored
        self.attempts[stored.operation_id] = {}
        self.events[stored.operation_id] = [event]
        return stored

    def commit(self, change: Change) -> OperationRecord:
        stored, event, attempt = rules.prepare_change(change)
        op_id = stored.operation_id
        current = self.operations[op_id]
        if current.fencing_token != change.before.fencing_token:
            raise LeaseLost(f"{op_id}: fencing token is now {current.fencing_token}")
        if current.version != change.before.version:
            raise StaleVersion(f"{op_id}: version is now {current.version}")
        rows = dict(self.attempts[op_id])
        if attempt is not None:
            rows[attempt.number] = attempt
        for update in change.attempt_updates:
            rows[update.number] = dataclasses.replace(
                rows[update.number], outcome=update.outcome, detail=update.detail
            )
        self.operations[op_id] = stored
        self.attempts[op_id] = rows
        if event is not None:
            self.events[op_id].append(event)
        return stored

    def attempt_rows(self, operation_id: str) -> tuple[AttemptRecord, ...]:
        rows = self.attempts[operation_id]
        return tuple(rows[n] for n in sorted(rows))

    # --- §5 leases, as the adapters take them (storage/leases.py, storage/fake.py) ---

    def claim(
        self, operation_id: str, owner: str, now: datetime, ttl: float
    ) -> OperationRecord | None:
        claimed = rules.claimed(self.operations[operation_id], owner, now, ttl)
        if claimed is not None:
            self.operations[operation_id] = claimed
        return claimed

    def renew_leases(self, owner: str, now: datetime, ttl: float) -> int:
        """O2: every open operation naming ``owner``; version untouched."""
        renewed = 0
        until = now + timedelta(seconds=ttl)
        for op_id, record in self.operations.items():
            if record.lease_owner == owner and is_open(record):
                self.operations[op_id] = dataclasses.replace(record, lease_expires_at=until)
                renewed += 1
        return renewed

    def expire_leases(self, owner_prefix: str, keep: str, now: datetime) -> int:
        """O3: a restarted replica ends its earlier processes' leases."""
        ended = 0
        for op_id, record in self.operations.items():
            owner = record.lease_owner
            ours = bool(owner) and owner != keep and str(owner).startswith(owner_prefix)
            if ours and lease_live(record, now):
                self.operations[op_id] = dataclasses.replace(record, lease_expires_at=now)
                ended += 1
        return ended
