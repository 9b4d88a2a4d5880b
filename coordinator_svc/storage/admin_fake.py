"""The operator's records in memory (``ports.AdminJournal``), mixed into FakeJournal.

The same semantics as ``admin_sql.SqlAdmin``: each method checks and writes
without an ``await`` in between, so on one event loop it is atomic.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from coordinator_svc.core.model import AttemptRecord, EventRecord, OperationRecord
from coordinator_svc.core.operator import (
    DrainRecord,
    OperationFilter,
    OperatorNotes,
    RequeueRecord,
    VerdictRecord,
)
from coordinator_svc.ports import InvalidWrite, PageCursor
from coordinator_svc.storage import admin_rules, rules
from coordinator_svc.storage.admin_sql import notes_from


class FakeAdmin:
    """The AdminJournal half of ``fake.FakeJournal`` (mixed into it)."""

    # Provided by FakeJournal.
    _operations: dict[str, OperationRecord]
    _by_key: dict[tuple[str, str], str]
    _events: dict[str, list[EventRecord]]
    _attempts: dict[str, dict[int, AttemptRecord]]
    _commits: int

    def _check_open(self) -> None: ...  # FakeJournal's

    def _admin_tables(
        self,
    ) -> tuple[dict[str, list[VerdictRecord]], dict[str, RequeueRecord], dict[str, DrainRecord]]:
        # Made on first use: FakeJournal.__init__ stays as it is.
        if not hasattr(self, "_verdict_rows"):
            self._verdict_rows: dict[str, list[VerdictRecord]] = {}
            self._requeue_rows: dict[str, RequeueRecord] = {}
            self._drain_rows: dict[str, DrainRecord] = {}
        return self._verdict_rows, self._requeue_rows, self._drain_rows

    async def list_operations(
        self, where: OperationFilter, limit: int, after: PageCursor | None
    ) -> list[OperationRecord]:
        self._check_open()
        verdicts, _, _ = self._admin_tables()
        cursor: tuple[datetime, str] | None = (
            None
            if after is None
            else (rules.as_utc(after.created_at, "cursor"), after.operation_id)
        )
        found = [
            record
            for record in self._operations.values()
            if where.matches(record, bool(verdicts.get(record.operation_id)))
            and (cursor is None or (record.created_at, record.operation_id) > cursor)
        ]
        found.sort(key=lambda r: (r.created_at, r.operation_id))
        return found[: max(limit, 0)]

    async def record_verdict(self, verdict: VerdictRecord) -> tuple[VerdictRecord, bool]:
        self._check_open()
        verdicts, _, _ = self._admin_tables()
        kept = verdicts.get(verdict.operation_id)
        if kept:
            return kept[0], False
        stored = admin_rules.check_verdict(self._operations.get(verdict.operation_id), verdict)
        verdicts[stored.operation_id] = [stored]
        self._commits += 1
        return stored, True

    async def verdicts(self, operation_id: str) -> list[VerdictRecord]:
        self._check_open()
        return list(self._admin_tables()[0].get(operation_id, ()))

    async def operator_notes(self, operation_ids: Sequence[str]) -> dict[str, OperatorNotes]:
        self._check_open()
        verdicts, requeues, _ = self._admin_tables()
        ids = list(dict.fromkeys(operation_ids))
        wanted = set(ids)
        first = {op_id: rows[0] for op_id, rows in verdicts.items() if rows and op_id in wanted}
        links = [
            link
            for link in requeues.values()
            if link.operation_id in wanted or link.requeued_as in wanted
        ]
        return notes_from(ids, first, links)

    async def requeue(
        self, link: RequeueRecord, operation: OperationRecord, first_event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        self._check_open()
        verdicts, requeues, _ = self._admin_tables()
        made = requeues.get(link.operation_id)
        if made is not None:
            return self._operations[made.requeued_as], True
        original = self._operations.get(link.operation_id)
        kept = verdicts.get(link.operation_id)
        stored_link, stored, event = admin_rules.check_requeue(
            original, kept[0] if kept else None, link, operation, first_event
        )
        key = (stored.principal, stored.idempotency_key_digest)
        if key in self._by_key:
            return self._operations[self._by_key[key]], True
        if stored.operation_id in self._operations:
            raise InvalidWrite(f"operation id {stored.operation_id} already exists")
        self._operations[stored.operation_id] = stored
        self._by_key[key] = stored.operation_id
        self._events[stored.operation_id] = [event]
        self._attempts[stored.operation_id] = {}
        requeues[stored_link.operation_id] = stored_link
        self._commits += 1
        return stored, False

    async def drain(self, record: DrainRecord) -> tuple[DrainRecord, bool]:
        self._check_open()
        stored = admin_rules.check_drain(record)
        drains = self._admin_tables()[2]
        if stored.runner in drains:
            return drains[stored.runner], False
        drains[stored.runner] = stored
        self._commits += 1
        return stored, True

    async def undrain(self, runner: str) -> DrainRecord | None:
        self._check_open()
        removed = self._admin_tables()[2].pop(runner, None)
        if removed is not None:
            self._commits += 1
        return removed

    async def drains(self) -> list[DrainRecord]:
        self._check_open()
        return sorted(self._admin_tables()[2].values(), key=lambda d: d.runner)
