"""The store as the asyncio shell sees it: SQL on one dedicated thread, memory on the loop.

One thread keeps SQLite single-writer and keeps fsyncs off the event loop.
Calls that reach SQL are queued in order, so a write issued before another
completes first. A read the store's mirror can answer (storage/mirror.py) is
answered on the loop with no thread hop (issue 10), unless a write of the
same row (for ``changes_after``: of any row) is still queued or running: then
the read queues behind it, as every read used to, so a read never misses a
write issued before it (let alone one already reported: the mirror takes a
write before the write returns).

A write may also be *queued* (``queue_write``): it takes its place in the
same order, and until the store's thread takes it up it can be withdrawn
(:class:`QueuedWrite`). The runner queues its start confirmations so: one
whose turn has finished meanwhile is dropped, and the settlement written
after it records the start (R3, issue 10).

Watchers subscribe to a :class:`ChangeFeed`: every committed row is pushed to
each feed (bounded; a feed that overflows says so, and its watcher catches up
from ``changes_after``), so a watch need not query the store after each write.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from runner_svc.core.model import OperationRow
from runner_svc.core.transitions import RowEvent
from runner_svc.storage.sqlite_store import SqliteRunnerStore
from runner_svc.storage.write_batch import Outcome
from turnwire.observability import tracing

_T = TypeVar("_T")

# A queued write: its handle, its operation and the change.
_Pending = tuple["QueuedWrite", str, RowEvent]

# Operations a feed holds for a watcher that has not taken them yet; beyond
# it the watcher reads from the store instead (memory stays bounded however
# slow a consumer is, or if one is abandoned without being closed).
FEED_CAPACITY = 1024


class ChangeFeed:
    """Committed rows for one watcher, each operation at its latest change, in
    sequence order: what ``changes_after`` would return, without asking.
    ``wanted``: the rows the watcher would not skip; the others are not kept
    and do not wake it (issue 10: most rows on a busy runner are its held
    Dispatches', which no watch sends)."""

    def __init__(
        self, capacity: int = FEED_CAPACITY, wanted: Callable[[OperationRow], bool] | None = None
    ) -> None:
        self._capacity = capacity
        self._wanted = wanted
        self._rows: OrderedDict[str, OperationRow] = OrderedDict()
        self._ready = asyncio.Event()
        # Rows were dropped: only the store can tell what changed.
        self.behind = False

    def push(self, row: OperationRow) -> None:
        if self.behind:
            return  # the catch-up read will include it
        if self._wanted is not None and not self._wanted(row):
            return
        self._rows[row.operation_id] = row
        self._rows.move_to_end(row.operation_id)
        if len(self._rows) > self._capacity:
            self._rows.clear()
            self.behind = True
        self._ready.set()

    def __len__(self) -> int:
        return len(self._rows)

    def take(self) -> list[OperationRow]:
        rows = list(self._rows.values())
        self._rows.clear()
        self._ready.clear()
        return rows

    def restart(self) -> None:
        """The watcher reads the store next: what was pushed so far is in that read."""
        self._rows.clear()
        self.behind = False
        self._ready.clear()

    def wake(self) -> None:
        self._ready.set()

    async def wait(self) -> None:
        await self._ready.wait()


class QueuedWrite:
    """A write handed to the store's thread that may be withdrawn until that
    thread takes it up. ``landed`` gives the written row, or None if withdrawn;
    it raises what the write raised."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken = False
        self._withdrawn = False
        self._counted_down = False
        self.landed: asyncio.Future[OperationRow | None]

    def withdraw(self) -> bool:
        """Drop the write if the store's thread has not taken it up; True if dropped."""
        with self._lock:
            if not self._taken:
                self._withdrawn = True
            return self._withdrawn

    def take(self) -> bool:
        """On the store's thread: take the write up unless it was withdrawn."""
        with self._lock:
            if not self._withdrawn:
                self._taken = True
            return self._taken

    def count_down_once(self) -> bool:
        """True the first time only: the pending-write count drops exactly once,
        whether the thread ran the write or a cancelled waiter withdrew it."""
        with self._lock:
            first, self._counted_down = not self._counted_down, True
            return first


class AsyncRunnerStore:
    def __init__(self, store: SqliteRunnerStore) -> None:
        self.store = store
        self.store_id = store.store_id
        self.durable = store.durable
        self.incarnation_id = store.incarnation_id
        self.openings = store.openings
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runner-store")
        self._feeds: set[ChangeFeed] = set()
        # Held Dispatch replies waiting for their turn to settle (issue 10).
        self._settling: dict[str, tuple[asyncio.Event, int]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        store.on_commit = self._committed
        # Writes issued and not finished, per operation: counted up on the
        # loop, down on the store's thread once the mirror has the outcome.
        self._writing: dict[str, int] = {}
        self._writing_lock = threading.Lock()
        # Writes queued in this turn of the loop, for the store's thread.
        self._pending: list[_Pending] = []
        self._flush_scheduled = False
        self._batches_out = 0  # batches sent to the thread and not yet landed
        self._closed = False

    async def _call(self, fn: Callable[..., _T], *args: object) -> _T:
        self._flush()  # writes queued before this call reach SQL before it
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, functools.partial(fn, *args))

    def remembered(self, operation_id: str) -> OperationRow | None:
        """The row from memory alone: None means unknown here (ask the store), never
        "absent"; also None while a write of it is queued or running."""
        if operation_id in self._writing:
            return None
        return self.store.mirror.row(operation_id)

    async def get(self, operation_id: str) -> OperationRow | None:
        if operation_id not in self._writing:
            row = self.store.mirror.row(operation_id)
            if row is not None:
                return row
        return await self._call(self.store.get, operation_id)

    async def get_many(self, operation_ids: Iterable[str]) -> dict[str, OperationRow]:
        ids = list(dict.fromkeys(operation_ids))
        if not any(operation_id in self._writing for operation_id in ids):
            found = self.store.mirror.rows(ids)
            if found is not None:
                return found
        return await self._call(self.store.get_many, ids)

    async def changes_after(self, sequence: int, limit: int = 500) -> list[OperationRow]:
        if not self._writing:
            recent = self.store.mirror.changes_after(sequence, limit)
            if recent is not None:
                return recent
        return await self._call(self.store.changes_after, sequence, limit)

    async def write(self, operation_id: str, change: RowEvent) -> OperationRow:
        # A span in the turn's trace when tracing is on (docs/TRACING.md).
        change_name = type(change).__name__
        with tracing.span("turnwire.runner.store_write", operation_id, change=change_name):
            row = await self.queue_write(operation_id, change).landed
        assert row is not None  # never withdrawn: nobody else holds it
        return row

    def queue_write(self, operation_id: str, change: RowEvent) -> QueuedWrite:
        """Queue ``change`` in write order without waiting for it; it may be
        withdrawn until the store's thread takes it up. Raises if it cannot be
        queued (the store is closed).

        Group commit (issue 10): writes queued in one turn of the event loop
        (a Dispatch's carried Releases and its admission) go to the store's
        thread together at the end of that turn, and those queued while a
        batch is being written go together as soon as it is done; each batch
        lands in one transaction (storage/write_batch.py). Any other call that
        reaches SQL sends the queued writes first, so the order stays the
        order of the calls."""
        if self._closed:
            raise RuntimeError("the runner store is closed")
        loop = asyncio.get_running_loop()
        queued = QueuedWrite()
        queued.landed = loop.create_future()
        with self._writing_lock:
            self._writing[operation_id] = self._writing.get(operation_id, 0) + 1
        self._pending.append((queued, operation_id, change))
        if not self._flush_scheduled and not self._batches_out:
            self._flush_scheduled = True
            loop.call_soon(self._flush)

        def cancelled(landed: asyncio.Future[OperationRow | None]) -> None:
            # A waiter cancelled before the thread took the write up withdraws
            # it (the thread skips it): count down here, once.
            if landed.cancelled() and queued.withdraw() and queued.count_down_once():
                self._written(operation_id)

        queued.landed.add_done_callback(cancelled)
        return queued

    def _flush(self) -> None:
        """Send the queued writes to the store's thread as one batch."""
        self._flush_scheduled = False
        batch, self._pending = self._pending, []
        if not batch:
            return
        try:
            job = asyncio.get_running_loop().run_in_executor(self._thread, self._write_batch, batch)
        except BaseException as exc:  # the thread is gone (closed): none of them ran
            self._fail(batch, exc)
            return
        self._batches_out += 1
        job.add_done_callback(functools.partial(self._landed, batch))

    def _write_batch(self, batch: list[_Pending]) -> list[Outcome | None]:
        """On the store's thread. Every write is counted down once the mirror has
        its outcome, even if its writer stopped waiting."""
        took = [queued.take() for queued, _, _ in batch]
        taken = [item for item, yes in zip(batch, took, strict=True) if yes]
        try:
            outcomes = (
                self.store.write_batch([(op, change) for _, op, change in taken]) if taken else []
            )
        finally:
            for queued, operation_id, _ in batch:
                if queued.count_down_once():
                    self._written(operation_id)
        landed = iter(outcomes)  # one per taken write, in batch order
        return [next(landed) if yes else None for yes in took]

    def _landed(self, batch: list[_Pending], job: asyncio.Future[list[Outcome | None]]) -> None:
        """On the loop: each writer gets its own outcome (None: withdrawn); the
        writes queued meanwhile go next, as one batch."""
        self._batches_out -= 1
        if self._pending and not self._batches_out:
            self._flush()
        if job.cancelled() or job.exception() is not None:
            self._fail(batch, job.exception() or asyncio.CancelledError())
            return
        for (queued, _, _), outcome in zip(batch, job.result(), strict=True):
            if queued.landed.done():
                continue  # its writer stopped waiting
            if isinstance(outcome, Exception):
                queued.landed.set_exception(outcome)
            else:
                queued.landed.set_result(outcome)

    def _fail(self, batch: list[_Pending], error: BaseException) -> None:
        for queued, operation_id, _ in batch:
            if queued.count_down_once():
                self._written(operation_id)
            if not queued.landed.done():
                queued.landed.set_exception(error)

    def _written(self, operation_id: str) -> None:
        with self._writing_lock:
            # Never popped while another write of it is pending: the loop
            # reads this dict without the lock.
            left = self._writing[operation_id] - 1
            if left:
                self._writing[operation_id] = left
            else:
                del self._writing[operation_id]

    async def advance_floor(self, target: int) -> int:
        return await self._call(self.store.advance_floor, target)

    async def maintain(
        self, work: Callable[[sqlite3.Connection], tuple[_T, Collection[str]]]
    ) -> _T:
        """Retention's transaction (SqliteRunnerStore.maintain), in write order."""
        return await self._call(self.store.maintain, work)

    async def pruned_among(self, operation_ids: Iterable[str]) -> set[str]:
        """Which of these ids were pruned, their keys kept (§9 K3)."""
        return await self._call(self.store.pruned_among, list(operation_ids))

    async def seal(self) -> bool:
        return await self._call(self.store.seal)

    async def record_executor_process(
        self, operation_id: str, pgid: int, start_time: int, boot_id: str, at: float
    ) -> None:
        records = self.store.executor_records()
        await self._call(records.record, operation_id, pgid, start_time, boot_id, at)

    # --- watchers ----------------------------------------------------------------

    @contextlib.contextmanager
    def subscribe(
        self,
        capacity: int = FEED_CAPACITY,
        wanted: Callable[[OperationRow], bool] | None = None,
    ) -> Iterator[ChangeFeed]:
        """A feed of every row committed from now on (subscribe before reading
        the store: a row committed in between then comes both ways, never neither),
        or of those ``wanted`` says the watcher keeps."""
        self._loop = asyncio.get_running_loop()
        feed = ChangeFeed(capacity, wanted)
        self._feeds.add(feed)
        try:
            yield feed
        finally:
            self._feeds.discard(feed)

    @contextlib.contextmanager
    def awaiting_settlement(self, operation_id: str) -> Iterator[asyncio.Event]:
        """An event set when a settled row of ``operation_id`` is committed from
        now on (callers check the row they hold first). Calls for one operation
        share it; it is forgotten when the last of them is done."""
        self._loop = asyncio.get_running_loop()
        event, users = self._settling.get(operation_id, (asyncio.Event(), 0))
        self._settling[operation_id] = (event, users + 1)
        try:
            yield event
        finally:
            event, users = self._settling[operation_id]
            if users > 1:
                self._settling[operation_id] = (event, users - 1)
            else:
                del self._settling[operation_id]

    def wake_watchers(self) -> None:
        for feed in list(self._feeds):
            feed.wake()

    def _committed(self, row: OperationRow) -> None:
        """On the store's thread, right after a COMMIT, before the write returns."""
        loop = self._loop
        # No feed now means none can miss this row: a feed made later reads
        # the store after subscribing, and the mirror already holds the row.
        if loop is None or not (self._feeds or self._settling):
            return
        # Queued before the writer's own result, in commit order, and whether
        # or not the writer is still waiting for it.
        with contextlib.suppress(RuntimeError):  # the loop is closed: no watcher is left
            loop.call_soon_threadsafe(self._deliver, row)

    def _deliver(self, row: OperationRow) -> None:
        for feed in list(self._feeds):
            feed.push(row)
        if row.settled:
            settling = self._settling.get(row.operation_id)
            if settling is not None:
                settling[0].set()

    async def close(self) -> None:
        await self._call(self.store.close)  # after the writes queued before it
        self._closed = True
        self._thread.shutdown(wait=True)
