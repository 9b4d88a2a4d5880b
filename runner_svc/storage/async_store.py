"""The store as the asyncio shell sees it: every call on one dedicated thread.

One thread keeps SQLite single-writer and keeps fsyncs off the event loop.
Calls are queued in order, so a write issued before another completes first.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from runner_svc.core.model import OperationRow
from runner_svc.core.transitions import RowEvent
from runner_svc.storage.sqlite_store import SqliteRunnerStore

_T = TypeVar("_T")


class AsyncRunnerStore:
    def __init__(self, store: SqliteRunnerStore) -> None:
        self.store = store
        self.store_id = store.store_id
        self.durable = store.durable
        self.incarnation_id = store.incarnation_id
        self.openings = store.openings
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runner-store")

    async def _call(self, fn: Callable[..., _T], *args: object) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, functools.partial(fn, *args))

    async def get(self, operation_id: str) -> OperationRow | None:
        return await self._call(self.store.get, operation_id)

    async def get_many(self, operation_ids: Iterable[str]) -> dict[str, OperationRow]:
        return await self._call(self.store.get_many, list(operation_ids))

    async def changes_after(self, sequence: int, limit: int = 500) -> list[OperationRow]:
        return await self._call(self.store.changes_after, sequence, limit)

    async def write(self, operation_id: str, change: RowEvent) -> OperationRow:
        return await self._call(self.store.write, operation_id, change)

    async def advance_floor(self, target: int) -> int:
        return await self._call(self.store.advance_floor, target)

    async def seal(self) -> bool:
        return await self._call(self.store.seal)

    async def record_executor_process(
        self, operation_id: str, pgid: int, start_time: int, boot_id: str, at: float
    ) -> None:
        records = self.store.executor_records()
        await self._call(records.record, operation_id, pgid, start_time, boot_id, at)

    async def close(self) -> None:
        await self._call(self.store.close)
        self._thread.shutdown(wait=True)
