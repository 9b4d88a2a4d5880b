"""The real journal, counting its calls by method (for bench/e2e.py).

``Journal.commits`` counts writes only; this also counts reads (``get``,
``events``, ``attempts``, ``due``...), which is where a coordinator's time
can go without any extra commit. Every call goes to the real adapter
unchanged; the wrapper adds a counter increment and nothing else.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from coordinator_svc.core.model import (
    AttemptRecord,
    Change,
    EventRecord,
    OperationRecord,
    OpState,
)
from coordinator_svc.ports import Journal, LeasingJournal, PageCursor


class CountingJournal:
    """Delegates every Journal method to ``inner``; ``calls[method]`` counts them."""

    def __init__(self, inner: LeasingJournal) -> None:
        # A leasing journal (what open_journal returns): ``claim`` is counted here too.
        self.inner = inner
        self.calls: collections.Counter[str] = collections.Counter()

    async def submit(
        self, operation: OperationRecord, first_event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        self.calls["submit"] += 1
        return await self.inner.submit(operation, first_event)

    async def get(self, operation_id: str) -> OperationRecord | None:
        self.calls["get"] += 1
        return await self.inner.get(operation_id)

    async def get_for_principal(self, principal: str, operation_id: str) -> OperationRecord | None:
        self.calls["get_for_principal"] += 1
        return await self.inner.get_for_principal(principal, operation_id)

    async def by_idempotency_key(
        self, principal: str, idempotency_key_digest: str
    ) -> OperationRecord | None:
        self.calls["by_idempotency_key"] += 1
        return await self.inner.by_idempotency_key(principal, idempotency_key_digest)

    async def list_for_principal(
        self, principal: str, states: Sequence[OpState], limit: int, after: PageCursor | None
    ) -> list[OperationRecord]:
        self.calls["list_for_principal"] += 1
        return await self.inner.list_for_principal(principal, states, limit, after)

    async def commit(self, change: Change) -> OperationRecord:
        self.calls["commit"] += 1
        return await self.inner.commit(change)

    async def events(self, operation_id: str, after_sequence: int, limit: int) -> list[EventRecord]:
        self.calls["events"] += 1
        return await self.inner.events(operation_id, after_sequence, limit)

    async def attempts(self, operation_id: str) -> list[AttemptRecord]:
        self.calls["attempts"] += 1
        return await self.inner.attempts(operation_id)

    async def due(self, now: datetime, limit: int, *, queued: bool = True) -> list[OperationRecord]:
        self.calls["due"] += 1
        return await self.inner.due(now, limit, queued=queued)

    async def claim(
        self, operation_id: str, owner: str, now: datetime, ttl_seconds: float
    ) -> OperationRecord | None:
        self.calls["claim"] += 1
        return await self.inner.claim(operation_id, owner, now, ttl_seconds)

    async def in_state(self, state: OpState, limit: int) -> list[OperationRecord]:
        self.calls["in_state"] += 1
        return await self.inner.in_state(state, limit)

    async def bound_to(
        self, runner: str, state: OpState, limit: int, *, other_than: str | None = None
    ) -> list[OperationRecord]:
        self.calls["bound_to"] += 1
        return await self.inner.bound_to(runner, state, limit, other_than=other_than)

    @property
    def commits(self) -> int:
        return self.inner.commits

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        """A method the adapter has and this file does not (added to the port later):
        still delegated, and counted under its own name, rather than breaking the bench."""
        attribute = getattr(self.inner, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attribute(*args, **kwargs)

        return counted


if TYPE_CHECKING:

    def _implements_the_port(counting: CountingJournal) -> Journal:
        return counting  # mypy proves the wrapper satisfies the Journal protocol
