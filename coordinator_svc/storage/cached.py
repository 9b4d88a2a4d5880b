"""A write-through cache in front of a journal: no re-reading what this process wrote.

A turn's reads were mostly of rows the same coordinator had just written:
the dispatcher loads the operation and its attempts before every decision,
and every WatchOperation stream reloads the operation and its events after
every change (~15 reads a turn, measured by bench/e2e.py for issue 10). A
lone coordinator (SQLite) is the journal's only writer, and a replica (§5)
is the only writer of the operations it owns but for another replica's
cancel mark, so what it committed last is the row: this wrapper keeps, per
recently used operation, the stored record and, once known in full, its
attempts and its events, and answers those reads from memory.

What keeps it true:
- Every write goes through to the journal first; the cache changes only
  after the journal committed, and only forward (a higher ``version``): a
  read that raced a commit can never put an older row back.
- The compare-and-set still guards every commit. A StaleVersion or
  LeaseLost means someone else wrote: the entry is dropped and the next read
  goes to the database. Any other failure drops it too (the write may or may
  not have committed: the database knows, the cache must not guess).
- Events and attempts are cached only as complete lists (from sequence or
  number 1 up to what the record says), then extended by our own commits.
  Events read from the database past the cached record drop that record:
  a watch sends each event with the record read after it, never an older one.
- Scans (due, in_state, listings, orphans) always read the database, and a
  newer row they bring replaces the cached one.
- Other writers (replicas on PostgreSQL) are heard: ``saw`` drops a copy
  older than a version another replica announced (NOTIFY, notifications.py)
  and keeps a read that left before that commit from being stored;
  ``clear`` forgets everything when notifications may have been missed.
- At most ``capacity`` operations and about ``max_bytes`` of envelopes and
  results are kept (least recently used goes first; a record bigger than
  the whole budget is not kept at all): memory stays bounded however long
  the coordinator runs and however large its turns. A terminal operation
  stays while it is recent: its watchers read its last event right after
  the terminal commit.

Use it where this process is the journal's only writer, or where every other
writer's commit is announced to ``saw``; an unannounced writer makes its
reads stale (never its writes: the CAS refuses them).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from coordinator_svc.core.model import (
    AttemptRecord,
    Change,
    EventRecord,
    OperationRecord,
    OpState,
)
from coordinator_svc.ports import Journal, LeasingJournal, PageCursor
from coordinator_svc.storage import rules
from coordinator_svc.storage.admin_cached import CachedAdmin

DEFAULT_CAPACITY = 4096
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
HEARD_CAPACITY_FACTOR = 4


def _weight(record: OperationRecord) -> int:
    """What a record costs in memory, roughly: its payloads dominate."""
    return 512 + len(record.envelope) + len(record.result or b"")


@dataclass
class _Entry:
    record: OperationRecord
    # Complete lists, or None while not known in full.
    events: list[EventRecord] | None = None
    attempts: list[AttemptRecord] | None = None


class CachedJournal(CachedAdmin):
    """The Journal port, answering reads of recently written operations from memory."""

    def __init__(
        self,
        inner: Journal,
        *,
        capacity: int = DEFAULT_CAPACITY,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if capacity < 1 or max_bytes < 1:
            raise ValueError("capacity and max_bytes must be at least 1")
        self.inner = inner
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._bytes = 0
        self._entries: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        # The newest version other writers are known to have committed, per
        # operation (``saw``; bounded): a read that left before that commit and
        # comes back after its notification must not be kept as the row.
        self._heard: collections.OrderedDict[str, int] = collections.OrderedDict()
        self.hits = 0
        self.misses = 0

    @property
    def commits(self) -> int:
        return self.inner.commits

    @property
    def cached(self) -> int:
        """Operations held in memory now (for tests and metrics)."""
        return len(self._entries)

    @property
    def cached_bytes(self) -> int:
        """Their weight (envelopes, results and a fixed overhead each)."""
        return self._bytes

    # -- the cache ------------------------------------------------------------

    def _entry(self, operation_id: str) -> _Entry | None:
        entry = self._entries.get(operation_id)
        if entry is not None:
            self._entries.move_to_end(operation_id)
        return entry

    def _learn(self, record: OperationRecord) -> _Entry | None:
        """Keep ``record`` unless the cache already holds a newer one."""
        entry = self._entries.get(record.operation_id)
        if entry is not None:
            if record.version > entry.record.version:
                # Moved on without us seeing how: the lists may be incomplete.
                self._put(_Entry(record))
            return self._entry(record.operation_id)
        return self._put(_Entry(record))

    def _put(self, entry: _Entry) -> _Entry | None:
        """Hold ``entry`` (replacing its operation's), then evict down to the bounds."""
        op_id = entry.record.operation_id
        self._forget(op_id)
        if entry.record.version < self._heard.get(op_id, 0):
            return None  # a newer commit was announced: this copy is already old
        weight = _weight(entry.record)
        if weight > self._max_bytes:
            return None  # would evict everything else: read it from the database
        self._entries[op_id] = entry
        self._bytes += weight
        while len(self._entries) > self._capacity or self._bytes > self._max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= _weight(evicted.record)
        return entry

    def _replace_record(self, entry: _Entry, record: OperationRecord) -> None:
        self._bytes += _weight(record) - _weight(entry.record)
        entry.record = record
        while self._bytes > self._max_bytes and len(self._entries) > 1:
            oldest = next(iter(self._entries))
            if oldest == record.operation_id:
                self._entries.move_to_end(oldest)
                continue
            self._bytes -= _weight(self._entries.pop(oldest).record)

    def _forget(self, operation_id: str) -> None:
        entry = self._entries.pop(operation_id, None)
        if entry is not None:
            self._bytes -= _weight(entry.record)

    def saw(self, operation_id: str, version: int) -> None:
        """Another writer committed ``version`` of this operation (a replica's
        NOTIFY, storage/notifications.py): an older copy here is dropped."""
        if version > self._heard.get(operation_id, 0):
            self._heard[operation_id] = version
            self._heard.move_to_end(operation_id)
            while len(self._heard) > HEARD_CAPACITY_FACTOR * self._capacity:
                self._heard.popitem(last=False)
        entry = self._entries.get(operation_id)
        if entry is not None and entry.record.version < version:
            self._forget(operation_id)

    def clear(self) -> None:
        """Forget everything (notifications may have been missed)."""
        self._entries.clear()
        self._bytes = 0

    def forget(self, operation_ids: Sequence[str]) -> None:
        """Retention deleted these operations (§9 K1): never serve them from memory."""
        for operation_id in operation_ids:
            self._forget(operation_id)

    # -- writes ---------------------------------------------------------------

    async def submit(
        self, operation: OperationRecord, first_event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        stored, replayed = await self.inner.submit(operation, first_event)
        entry = self._learn(stored)
        if entry is not None and not replayed and entry.record.version == stored.version:
            # As the journal stored it (it validated the submit; not again here).
            entry.events = [rules.event_in_utc(first_event, 1)]
            entry.attempts = []
        return stored, replayed

    async def commit(self, change: Change) -> OperationRecord:
        op_id = change.before.operation_id
        try:
            stored = await self.inner.commit(change)
        except BaseException:
            self._forget(op_id)  # conflict, failure or cancel: ask the database next
            raise
        # The event and attempt as the journal stored them (it validated the
        # change; the cache only normalises, it does not check again).
        event = (
            rules.event_in_utc(change.event, stored.last_event_sequence)
            if change.event is not None
            else None
        )
        attempt = (
            rules.attempt_in_utc(change.new_attempt) if change.new_attempt is not None else None
        )
        entry = self._entries.get(op_id)
        if entry is None or entry.record.version != change.before.version:
            # Memory did not hold the row this change was made from (a read
            # raced it, or it was evicted): keep just the record.
            self._forget(op_id)
            self._learn(stored)
            return stored
        self._replace_record(entry, stored)
        if entry.events is not None and event is not None:
            entry.events.append(event)
        if entry.attempts is not None:
            entry.attempts = _attempts_after(entry.attempts, change, attempt)
        self._entries.move_to_end(op_id)
        return stored

    # -- reads ----------------------------------------------------------------

    async def get(self, operation_id: str) -> OperationRecord | None:
        entry = self._entry(operation_id)
        if entry is not None:
            self.hits += 1
            return entry.record
        self.misses += 1
        record = await self.inner.get(operation_id)
        if record is not None:
            self._learn(record)
        return record

    async def get_for_principal(self, principal: str, operation_id: str) -> OperationRecord | None:
        entry = self._entry(operation_id)
        if entry is not None:
            self.hits += 1
            return entry.record if entry.record.principal == principal else None
        self.misses += 1
        record = await self.inner.get_for_principal(principal, operation_id)
        if record is not None:
            self._learn(record)
        return record

    async def events(self, operation_id: str, after_sequence: int, limit: int) -> list[EventRecord]:
        entry = self._entry(operation_id)
        if entry is not None and entry.events is not None:
            self.hits += 1
            return _page(entry.events, after_sequence, limit)
        self.misses += 1
        found = await self.inner.events(operation_id, after_sequence, limit)
        entry = self._entry(operation_id)
        if entry is not None and found and found[-1].sequence > entry.record.last_event_sequence:
            # The journal is past the row held here (another replica committed; its
            # notification not heard yet): drop it, so the record read next, sent
            # with these events, is at least as new as they are.
            self._forget(operation_id)
            return found
        if (
            entry is not None
            and after_sequence == 0
            and len(found) == entry.record.last_event_sequence
            and (not found or found[-1].sequence == entry.record.last_event_sequence)
        ):
            entry.events = list(found)
        return found

    async def attempts(self, operation_id: str) -> list[AttemptRecord]:
        entry = self._entry(operation_id)
        if entry is not None and entry.attempts is not None:
            self.hits += 1
            return list(entry.attempts)
        self.misses += 1
        found = await self.inner.attempts(operation_id)
        entry = self._entry(operation_id)
        if entry is not None and len(found) > entry.record.attempt_count:
            self._forget(operation_id)  # as in events(): the row held here is older
            return found
        if entry is not None and len(found) == entry.record.attempt_count:
            entry.attempts = list(found)
        return found

    async def by_idempotency_key(
        self, principal: str, idempotency_key_digest: str
    ) -> OperationRecord | None:
        return await self.inner.by_idempotency_key(principal, idempotency_key_digest)

    async def list_for_principal(
        self,
        principal: str,
        states: Sequence[OpState],
        limit: int,
        after: PageCursor | None,
    ) -> list[OperationRecord]:
        return await self.inner.list_for_principal(principal, states, limit, after)

    async def due(self, now: datetime, limit: int, *, queued: bool = True) -> list[OperationRecord]:
        return self._fresher(await self.inner.due(now, limit, queued=queued))

    async def in_state(self, state: OpState, limit: int) -> list[OperationRecord]:
        return self._fresher(await self.inner.in_state(state, limit))

    async def bound_to(
        self, runner: str, state: OpState, limit: int, *, other_than: str | None = None
    ) -> list[OperationRecord]:
        return self._fresher(await self.inner.bound_to(runner, state, limit, other_than=other_than))

    def _fresher(self, scanned: list[OperationRecord]) -> list[OperationRecord]:
        """A scan read the database: a cached row it shows newer (another replica
        wrote it, §5: a client's cancel, an adoption) is replaced, never older."""
        for record in scanned:
            entry = self._entries.get(record.operation_id)
            if entry is not None and record.version > entry.record.version:
                self._put(_Entry(record))
        return scanned

    # -- §5 leases (when the journal takes them: ports.LeasingJournal) ---------

    def _leasing(self) -> LeasingJournal:
        if not isinstance(self.inner, LeasingJournal):
            raise TypeError(f"{type(self.inner).__name__} takes no leases")
        return self.inner

    async def claim(
        self, operation_id: str, owner: str, now: datetime, ttl_seconds: float
    ) -> OperationRecord | None:
        try:
            claimed = await self._leasing().claim(operation_id, owner, now, ttl_seconds)
        except BaseException:
            self._forget(operation_id)
            raise
        if claimed is None:
            self._forget(operation_id)  # someone else's, or busy: read it fresh next time
        else:
            self._learn(claimed)
        return claimed

    async def renew_leases(self, owner: str, now: datetime, ttl_seconds: float) -> int:
        # Cached rows keep their older expiry: only claims read it, and a claim
        # reads the row from the database (under its lock).
        return await self._leasing().renew_leases(owner, now, ttl_seconds)

    async def orphans(self, owner: str, now: datetime, limit: int) -> list[OperationRecord]:
        return self._fresher(await self._leasing().orphans(owner, now, limit))

    async def expire_leases(self, owner_prefix: str, keep: str, now: datetime) -> int:
        return await self._leasing().expire_leases(owner_prefix, keep, now)

    async def live_leases(self, owner_prefix: str, keep: str, now: datetime) -> dict[str, datetime]:
        return await self._leasing().live_leases(owner_prefix, keep, now)

    async def close(self) -> None:
        self._entries.clear()
        self._bytes = 0
        await self.inner.close()


def _page(events: list[EventRecord], after_sequence: int, limit: int) -> list[EventRecord]:
    # Complete lists hold sequence n at index n - 1.
    start = max(after_sequence, 0)
    return events[start : start + max(limit, 0)]


def _attempts_after(
    attempts: list[AttemptRecord], change: Change, new_attempt: AttemptRecord | None
) -> list[AttemptRecord]:
    updates = {update.number: update for update in change.attempt_updates}
    result = []
    for attempt in attempts:
        update = updates.get(attempt.number)
        if update is not None:
            attempt = AttemptRecord(
                operation_id=attempt.operation_id,
                number=attempt.number,
                runner=attempt.runner,
                incarnation_id=attempt.incarnation_id,
                store_id=attempt.store_id,
                sent_at=attempt.sent_at,
                outcome=update.outcome,
                detail=update.detail,
            )
        result.append(attempt)
    if new_attempt is not None:
        result.append(new_attempt)
    return result
