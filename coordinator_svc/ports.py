"""The coordinator's ports: what the shell needs from the outside world.

Adapters: ``storage.sql.SqlJournal`` (SQLite and PostgreSQL) and
``storage.fake.FakeJournal`` (in memory); all three pass the same contract
tests in ``tests/coordinator/storage``.

Error tree (every adapter raises only these, and fails closed: a storage
failure changes nothing and surfaces, it is never swallowed)::

    JournalError
    ├── JournalUnavailable      the database could not be read or written
    ├── SchemaTooNew            the journal was written by newer code
    ├── IdempotencyKeyReused    same principal + key, different request digest
    └── WriteConflict           the compare-and-set matched no row
        ├── StaleVersion        same fencing token, newer version: reload, decide again
        └── LeaseLost           the fencing token moved on: send nothing more (§5)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from coordinator_svc.core.model import (
    AttemptRecord,
    Change,
    EventRecord,
    OperationRecord,
    OpState,
)


class JournalError(Exception):
    """Base of every journal failure."""


class JournalUnavailable(JournalError):
    """The database could not be read or written; nothing changed."""


class SchemaTooNew(JournalError):
    """The journal's schema revision is unknown to this code."""


class IdempotencyKeyReused(JournalError):
    """The principal used this idempotency key with a different request."""

    def __init__(self, operation_id: str) -> None:
        super().__init__(f"idempotency key already used for {operation_id}")
        self.operation_id = operation_id


class WriteConflict(JournalError):
    """A compare-and-set write matched no row."""


class StaleVersion(WriteConflict):
    """Another writer changed the row first (same fencing token)."""


class LeaseLost(WriteConflict):
    """The fencing token changed: another replica owns the operation."""


@dataclass(frozen=True)
class PageCursor:
    """Where a listing resumes: strictly after this (created_at, operation_id)."""

    created_at: datetime
    operation_id: str


class Journal(Protocol):
    """The durable journal (C1, C4, C10, C12, C13, §5)."""

    async def submit(
        self, operation: OperationRecord, first_event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        """Insert a new operation and its first event in one transaction (C1).

        If (principal, idempotency_key_digest) already exists: return the
        existing record and True when its request_digest matches, else raise
        IdempotencyKeyReused. Concurrent submits with one key make one row.
        """
        ...

    async def get(self, operation_id: str) -> OperationRecord | None: ...

    async def get_for_principal(
        self, principal: str, operation_id: str
    ) -> OperationRecord | None:
        """The operation only if it belongs to ``principal`` (§7: else None)."""
        ...

    async def list_for_principal(
        self,
        principal: str,
        states: Sequence[OpState],
        limit: int,
        after: PageCursor | None,
    ) -> list[OperationRecord]:
        """Ordered by (created_at, operation_id); ``states`` empty means all."""
        ...

    async def commit(self, change: Change) -> OperationRecord:
        """Apply one Change atomically as a compare-and-set (C4, C13, §5).

        Checks the edge is legal (core.edges) when the state changes, writes
        the row with version + 1, appends the event with the next sequence,
        inserts/updates attempt rows. Returns the stored record.
        Raises StaleVersion / LeaseLost / IllegalTransition / JournalUnavailable.
        """
        ...

    async def events(
        self, operation_id: str, after_sequence: int, limit: int
    ) -> list[EventRecord]: ...

    async def attempts(self, operation_id: str) -> list[AttemptRecord]: ...

    async def due(self, now: datetime, limit: int) -> list[OperationRecord]:
        """Non-terminal operations whose next_action_at is unset or <= now,
        plus terminal ones not yet released; oldest first."""
        ...

    async def claim(
        self, operation_id: str, owner: str, now: datetime, ttl_seconds: float
    ) -> OperationRecord | None:
        """Take or renew the lease (§5): succeeds if unleased, expired, or
        already ours. Taking over someone else's expired lease increments
        fencing_token. Returns None if another owner holds a live lease.
        Uses SELECT … FOR UPDATE SKIP LOCKED on PostgreSQL, BEGIN IMMEDIATE
        on SQLite."""
        ...

    async def in_state(self, state: OpState, limit: int) -> list[OperationRecord]: ...

    @property
    def commits(self) -> int:
        """Write transactions committed since start (for bench/)."""
        ...

    async def close(self) -> None: ...
