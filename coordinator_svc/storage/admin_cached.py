"""The operator's records through the write-through cache: passed to the journal.

Mixed into ``cached.CachedJournal``. The records live beside the operations
(never in a cached row), so nothing here is served from memory; a requeued
operation is read from the journal the first time it is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from coordinator_svc.core.membership import MembershipRecord, RunnerRoster
from coordinator_svc.core.model import EventRecord, OperationRecord
from coordinator_svc.core.operator import (
    DrainRecord,
    OperationFilter,
    OperatorNotes,
    RequeueRecord,
    VerdictRecord,
)
from coordinator_svc.ports import AdminJournal, Journal, PageCursor


class CachedAdmin:
    """The AdminJournal half of ``cached.CachedJournal`` (mixed into it)."""

    inner: Journal

    def _admin(self) -> AdminJournal:
        if not isinstance(self.inner, AdminJournal):
            raise TypeError(f"{type(self.inner).__name__} keeps no operator records")
        return self.inner

    async def list_operations(
        self, where: OperationFilter, limit: int, after: PageCursor | None
    ) -> list[OperationRecord]:
        return await self._admin().list_operations(where, limit, after)

    async def record_verdict(self, verdict: VerdictRecord) -> tuple[VerdictRecord, bool]:
        return await self._admin().record_verdict(verdict)

    async def verdicts(self, operation_id: str) -> list[VerdictRecord]:
        return await self._admin().verdicts(operation_id)

    async def operator_notes(self, operation_ids: Sequence[str]) -> dict[str, OperatorNotes]:
        return await self._admin().operator_notes(operation_ids)

    async def requeue(
        self, link: RequeueRecord, operation: OperationRecord, first_event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        return await self._admin().requeue(link, operation, first_event)

    async def drain(self, record: DrainRecord) -> tuple[DrainRecord, bool]:
        return await self._admin().drain(record)

    async def undrain(self, runner: str) -> DrainRecord | None:
        return await self._admin().undrain(runner)

    async def drains(self) -> list[DrainRecord]:
        return await self._admin().drains()

    async def add_runner(self, record: MembershipRecord) -> tuple[MembershipRecord, bool]:
        return await self._admin().add_runner(record)

    async def remove_runner(
        self,
        runner: str,
        *,
        generation: int,
        by: str,
        reason: str,
        at: datetime,
        force: bool,
    ) -> tuple[MembershipRecord, bool]:
        return await self._admin().remove_runner(
            runner, generation=generation, by=by, reason=reason, at=at, force=force
        )

    async def runner_roster(self) -> RunnerRoster:
        return await self._admin().runner_roster()

    async def bound_turns(self) -> dict[str, int]:
        return await self._admin().bound_turns()
