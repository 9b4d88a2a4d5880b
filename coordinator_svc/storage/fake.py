"""An in-memory Journal with the same semantics as ``sql.SqlJournal``.

For tests of the shell and the transports: it passes the same contract suite
(``tests/coordinator/storage``) as SQLite and PostgreSQL. Each method does
all its checks and writes without an ``await`` in between, so on one event
loop every write is atomic, like a transaction.

``set_available(False)`` makes every call raise ``JournalUnavailable`` and
change nothing, so callers can test that they fail closed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta

from coordinator_svc.core.model import (
    AttemptRecord,
    Change,
    EventRecord,
    OperationRecord,
    OpState,
)
from coordinator_svc.core.ownership import is_open, is_orphan, lease_live
from coordinator_svc.ports import (
    IdempotencyKeyReused,
    InvalidWrite,
    JournalUnavailable,
    LeaseLost,
    PageCursor,
    StaleVersion,
)
from coordinator_svc.storage import rules
from coordinator_svc.storage.admin_fake import FakeAdmin
from coordinator_svc.storage.membership_fake import FakeMembership


def _order_key(record: OperationRecord) -> tuple[datetime, str]:
    return (record.created_at, record.operation_id)


class FakeJournal(FakeAdmin, FakeMembership):
    """The Journal port in memory (see ``coordinator_svc.ports.Journal``)."""

    def __init__(self) -> None:
        self._operations: dict[str, OperationRecord] = {}
        self._by_key: dict[tuple[str, str], str] = {}
        self._events: dict[str, list[EventRecord]] = {}
        self._attempts: dict[str, dict[int, AttemptRecord]] = {}
        self._commits = 0
        self._available = True
        self._closed = False

    def set_available(self, available: bool) -> None:
        """Simulate the database going away (False) or coming back (True)."""
        self._available = available

    def _check_open(self) -> None:
        if self._closed:
            raise JournalUnavailable("the journal is closed")
        if not self._available:
            raise JournalUnavailable("the in-memory journal is marked unavailable")

    @property
    def commits(self) -> int:
        return self._commits

    async def submit(
        self, operation: OperationRecord, first_event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        self._check_open()
        stored, event = rules.prepare_submit(operation, first_event)
        key = (stored.principal, stored.idempotency_key_digest)
        existing_id = self._by_key.get(key)
        if existing_id is not None:
            existing = self._operations[existing_id]
            if existing.request_digest != stored.request_digest:
                raise IdempotencyKeyReused(existing.operation_id)
            return existing, True
        if stored.operation_id in self._operations:
            raise InvalidWrite(f"operation id {stored.operation_id} already exists")
        self._operations[stored.operation_id] = stored
        self._by_key[key] = stored.operation_id
        self._events[stored.operation_id] = [event]
        self._attempts[stored.operation_id] = {}
        self._commits += 1
        return stored, False

    async def get(self, operation_id: str) -> OperationRecord | None:
        self._check_open()
        return self._operations.get(operation_id)

    async def get_for_principal(self, principal: str, operation_id: str) -> OperationRecord | None:
        self._check_open()
        record = self._operations.get(operation_id)
        return record if record is not None and record.principal == principal else None

    async def by_idempotency_key(
        self, principal: str, idempotency_key_digest: str
    ) -> OperationRecord | None:
        self._check_open()
        existing_id = self._by_key.get((principal, idempotency_key_digest))
        return self._operations[existing_id] if existing_id is not None else None

    async def list_for_principal(
        self,
        principal: str,
        states: Sequence[OpState],
        limit: int,
        after: PageCursor | None,
    ) -> list[OperationRecord]:
        self._check_open()
        wanted = set(states)
        cursor = (
            None
            if after is None
            else (rules.as_utc(after.created_at, "cursor"), after.operation_id)
        )
        found = [
            record
            for record in self._operations.values()
            if record.principal == principal
            and (not wanted or record.state in wanted)
            and (cursor is None or _order_key(record) > cursor)
        ]
        return sorted(found, key=_order_key)[: max(limit, 0)]

    async def commit(self, change: Change) -> OperationRecord:
        self._check_open()
        stored, event, attempt = rules.prepare_change(change)
        op_id = stored.operation_id
        current = self._operations.get(op_id)
        if current is None:
            raise InvalidWrite(f"operation {op_id} does not exist")
        if current.fencing_token != change.before.fencing_token:
            raise LeaseLost(f"{op_id}: fencing token is now {current.fencing_token}")
        if current.version != change.before.version or current.state != change.before.state:
            raise StaleVersion(f"{op_id}: version is now {current.version}")
        attempts = dict(self._attempts[op_id])
        if attempt is not None:
            attempts[attempt.number] = attempt
        for update in change.attempt_updates:
            attempts[update.number] = dataclasses.replace(
                attempts[update.number], outcome=update.outcome, detail=update.detail
            )
        self._operations[op_id] = stored
        self._attempts[op_id] = attempts
        if event is not None:
            self._events[op_id].append(event)
        self._commits += 1
        return stored

    async def events(self, operation_id: str, after_sequence: int, limit: int) -> list[EventRecord]:
        self._check_open()
        found = [e for e in self._events.get(operation_id, []) if e.sequence > after_sequence]
        return found[: max(limit, 0)]

    async def attempts(self, operation_id: str) -> list[AttemptRecord]:
        self._check_open()
        rows = self._attempts.get(operation_id, {})
        return [rows[number] for number in sorted(rows)]

    async def due(self, now: datetime, limit: int, *, queued: bool = True) -> list[OperationRecord]:
        self._check_open()
        now = rules.as_utc(now, "due time")
        found = [
            r
            for r in self._operations.values()
            if rules.is_due(r, now) and (queued or r.state is not OpState.QUEUED)
        ]
        return sorted(found, key=_order_key)[: max(limit, 0)]

    async def claim(
        self, operation_id: str, owner: str, now: datetime, ttl_seconds: float
    ) -> OperationRecord | None:
        self._check_open()
        current = self._operations.get(operation_id)
        if current is None:
            return None
        updated = rules.claimed(current, owner, now, ttl_seconds)
        if updated is None:
            return None
        self._operations[operation_id] = updated
        self._commits += 1
        return updated

    async def renew_leases(self, owner: str, now: datetime, ttl_seconds: float) -> int:
        self._check_open()
        rules.check_lease_request(owner, ttl_seconds)
        now = rules.as_utc(now, "renewal time")
        until = now + timedelta(seconds=ttl_seconds)
        renewed = 0
        for op_id, record in self._operations.items():
            if record.lease_owner == owner and is_open(record):
                self._operations[op_id] = dataclasses.replace(record, lease_expires_at=until)
                renewed += 1
        return renewed

    async def orphans(self, owner: str, now: datetime, limit: int) -> list[OperationRecord]:
        self._check_open()
        now = rules.as_utc(now, "orphan scan time")
        found = [r for r in self._operations.values() if is_orphan(r, owner, now)]
        return sorted(found, key=_order_key)[: max(limit, 0)]

    async def expire_leases(self, owner_prefix: str, keep: str, now: datetime) -> int:
        self._check_open()
        if not owner_prefix:
            raise InvalidWrite("expire_leases needs a non-empty owner prefix")
        now = rules.as_utc(now, "expiry time")
        expired = 0
        for op_id, record in self._operations.items():
            owner = record.lease_owner
            if owner is None or owner == keep or not owner.startswith(owner_prefix):
                continue
            if lease_live(record, now):
                self._operations[op_id] = dataclasses.replace(record, lease_expires_at=now)
                expired += 1
        return expired

    async def live_leases(self, owner_prefix: str, keep: str, now: datetime) -> dict[str, datetime]:
        self._check_open()
        now = rules.as_utc(now, "lease read time")
        latest: dict[str, datetime] = {}
        for record in self._operations.values():
            owner, until = record.lease_owner, record.lease_expires_at
            if owner is None or owner == keep or not owner.startswith(owner_prefix):
                continue
            if until is not None and until > now and is_open(record):
                latest[owner] = max(until, latest.get(owner, until))
        return latest

    async def in_state(self, state: OpState, limit: int) -> list[OperationRecord]:
        self._check_open()
        found = [r for r in self._operations.values() if r.state == state]
        return sorted(found, key=_order_key)[: max(limit, 0)]

    async def bound_to(
        self, runner: str, state: OpState, limit: int, *, other_than: str | None = None
    ) -> list[OperationRecord]:
        found = [
            r
            for r in await self.in_state(state, len(self._operations))
            if r.runner == runner and (other_than is None or r.incarnation_id != other_than)
        ]
        return found[: max(limit, 0)]

    async def close(self) -> None:
        self._closed = True
