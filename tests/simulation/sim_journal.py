"""The coordinator's journal in memory, with the Journal port's write rules.

Every write goes through ``coordinator_svc.storage.rules`` (legal edges, C13
bookkeeping, frozen terminal outcome fields) and is a compare-and-set on
(version, fencing_token), exactly as ``storage.fake.FakeJournal``, but
synchronous so a simulation step is one atomic transaction.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from coordinator_svc.core.model import AttemptRecord, Change, EventRecord, OperationRecord
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
