"""Reads from memory on the event loop, and watches fed by pushed changes (issue 10).

Real SQLite files and the real service; the store's thread is made busy the
way a slow fsync would: another connection holds SQLite's write lock, so a
write queued on the thread (a row's, or the floor's) blocks inside it (busy
timeout 5 s) and every call queued after it waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from runner_svc import service_watch
from runner_svc.core.model import Execution, OperationRow, RowState, SlotKind, StopReason
from runner_svc.core.transitions import (
    Admit,
    LaunchIntent,
    RecordStopReason,
    Release,
    RowEvent,
    Settle,
)
from runner_svc.executors import load_executor
from runner_svc.service import OperationView, RunnerService, ServiceSettings
from runner_svc.storage.async_store import AsyncRunnerStore
from runner_svc.storage.mirror import StoreMirror
from runner_svc.storage.sqlite_store import SqliteRunnerStore
from tests.runner.storage.sql_reference import sql_changes

A = "a" * 32
SOON = 1.0  # seconds: far more than a memory read takes, far less than the busy timeout


def admit(op: str) -> Admit:
    return Admit(op, A, SlotKind.WRITABLE, "d" * 64, 1, 1, 1.0, 5)


@contextlib.contextmanager
def write_lock_held(path: Path) -> Iterator[None]:
    """Another connection holds SQLite's write lock: the store's next write waits in it."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@contextlib.asynccontextmanager
async def opened(path: Path, **mirror: int) -> AsyncIterator[AsyncRunnerStore]:
    store = SqliteRunnerStore.open(path, A)
    if mirror:  # as if opened with a smaller mirror (as a long-lived runner's fills up)
        store.mirror = StoreMirror(store.last_sequence(), **mirror)
    wrapped = AsyncRunnerStore(store)
    try:
        yield wrapped
    finally:
        await wrapped.close()


async def busy_thread(store: AsyncRunnerStore) -> asyncio.Future[int]:
    """The store's thread busy with a write of no row (the floor), blocked on the held lock."""
    pending = asyncio.ensure_future(store.advance_floor(1))
    await asyncio.sleep(0.1)  # it reached the thread and waits for SQLite's lock
    assert not pending.done()
    return pending


def test_reads_in_memory_answer_on_the_loop_while_the_store_thread_is_busy(
    tmp_path: Path,
) -> None:
    """Issue 10: get, get_many and changes_after need no thread hop when memory has the
    answer; a miss still queues on the store's thread (and waits for it)."""
    path = tmp_path / "r.db"

    async def main() -> None:
        async with opened(path) as store:
            await store.write("op_1", admit("op_1"))
            written = await store.write("op_1", LaunchIntent(A))
            with write_lock_held(path):
                pending = await busy_thread(store)
                assert await asyncio.wait_for(store.get("op_1"), SOON) == written
                assert await asyncio.wait_for(store.get_many(["op_1"]), SOON) == {"op_1": written}
                assert await asyncio.wait_for(store.changes_after(0), SOON) == [written]
                miss = asyncio.ensure_future(store.get("op_unknown"))
                await asyncio.sleep(0.2)
                assert not miss.done()  # behind the blocked write, as every SQL read is
            assert await pending == 1
            assert await miss is None

    asyncio.run(main())


def test_a_read_issued_after_a_write_of_the_same_row_sees_that_write(tmp_path: Path) -> None:
    """Issue 10: memory never answers for a row with a write still queued or running: the
    read waits behind it (as every read did when all went through the thread), so it
    never returns the row as it was before a write issued earlier."""
    path = tmp_path / "r.db"

    async def main() -> None:
        async with opened(path) as store:
            await store.write("op", admit("op"))
            with write_lock_held(path):
                stop = asyncio.ensure_future(store.write("op", RecordStopReason(StopReason.CANCEL)))
                await asyncio.sleep(0.1)
                read = asyncio.ensure_future(store.get("op"))
                read_many = asyncio.ensure_future(store.get_many(["op"]))
                changes = asyncio.ensure_future(store.changes_after(0))
                await asyncio.sleep(0.2)
                assert not read.done() and not read_many.done() and not changes.done()
            stopped = await stop
            assert await read == stopped and (await read_many)["op"] == stopped
            assert await changes == [stopped]
            assert stopped.stop_reason is StopReason.CANCEL
            assert await asyncio.wait_for(store.get("op"), SOON) == stopped  # memory again

    asyncio.run(main())


async def next_rows(
    watch: AsyncIterator[OperationView | None], until: int
) -> list[tuple[str, int, RowState]]:
    """Rows the watch yields until it sends one at sequence ``until`` (bounded)."""
    seen: list[tuple[str, int, RowState]] = []
    while not seen or seen[-1][1] < until:
        view = await asyncio.wait_for(anext(watch), SOON)
        if view is not None:
            seen.append((view.row.operation_id, view.row.sequence, view.row.state))
    return seen


def as_seen(rows: list[OperationRow]) -> list[tuple[str, int, RowState]]:
    return [(row.operation_id, row.sequence, row.state) for row in rows]


def service_on(store: AsyncRunnerStore, **settings: float) -> RunnerService:
    return RunnerService(
        store, load_executor("echo"), ServiceSettings(heartbeat_seconds=30.0, **settings)
    )


def test_a_watch_gets_pushed_changes_without_reading_the_store(tmp_path: Path) -> None:
    """Issue 10: a live watch is fed the committed rows: it yields them while the store's
    thread is blocked and the cursor is older than memory's window of changes, where any
    read of changes would have to wait for SQL."""
    path = tmp_path / "r.db"

    async def main() -> None:
        async with opened(path, changes_kept=1) as store:
            service = service_on(store)
            watch = service.watch(0)
            assert await asyncio.wait_for(anext(watch), SOON) is None  # nothing to replay
            changes: list[tuple[str, RowEvent]] = [
                ("op_1", admit("op_1")),
                ("op_2", admit("op_2")),
                ("op_1", LaunchIntent(A)),
            ]
            for op, change in changes:
                await store.write(op, change)
            assert store.store.mirror.changes_after(0, 500) is None  # SQL's to answer
            with write_lock_held(path):
                pending = await busy_thread(store)
                seen = await next_rows(watch, until=3)
            await pending
            assert seen == [("op_2", 2, RowState.ACCEPTED), ("op_1", 3, RowState.LAUNCHING)]
            assert seen == as_seen(sql_changes(path, 0))
            service.end_watches()
            assert [view async for view in watch] == []  # ends on shutdown

    asyncio.run(main())


@pytest.mark.rule("C9", "C10")
def test_rows_a_watch_skips_neither_fill_nor_wake_its_feed(tmp_path: Path) -> None:
    """C9/C10 (issue 10): a held Dispatch's rows and released rows are never sent by a
    watch, so they are not kept in its feed and do not wake it; the next row it sends
    does."""
    path = tmp_path / "r.db"

    async def main() -> None:
        async with opened(path) as store:
            held = {"op_1"}
            with store.subscribe(wanted=lambda row: row.operation_id not in held) as feed:
                await store.write("op_1", admit("op_1"))
                await store.write("op_1", LaunchIntent(A))
                await asyncio.sleep(0)  # the pushes run on the loop
                assert len(feed) == 0
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(feed.wait(), 0.05)
                    raise AssertionError("a skipped row woke the feed")
                await store.write("op_2", admit("op_2"))
                await asyncio.wait_for(feed.wait(), SOON)
                assert [row.operation_id for row in feed.take()] == ["op_2"]

    asyncio.run(main())


@pytest.mark.rule("C9")
def test_a_watch_that_fell_behind_catches_up_with_exactly_what_sql_has(tmp_path: Path) -> None:
    """Issue 10, C9: a slow consumer's feed is bounded; once it overflows the watch reads
    the store from its cursor (SQL, when the cursor is older than memory's window) and
    yields each changed row once, at its latest change, in sequence order; then it is
    fed live changes again."""
    path = tmp_path / "r.db"

    async def main() -> None:
        async with opened(path, changes_kept=3) as store:
            await store.write("op_0", admit("op_0"))
            service = service_on(store, watch_buffer=2)
            watch = service.watch(0)
            assert await next_rows(watch, until=1) == [("op_0", 1, RowState.ACCEPTED)]
            for n in range(1, 7):  # the consumer reads nothing meanwhile
                await store.write(f"op_{n}", admit(f"op_{n}"))
            for n in (2, 5, 1):
                await store.write(f"op_{n}", RecordStopReason(StopReason.CANCEL))
            assert store.store.mirror.changes_after(1, 500) is None  # SQL's to answer
            (feed,) = store._feeds  # what the waiting watch holds: bounded, and it knows
            assert feed.behind and len(feed) == 0
            caught_up = await next_rows(watch, until=10)
            assert caught_up == as_seen(sql_changes(path, 1))
            assert len({op for op, _, _ in caught_up}) == len(caught_up) == 6
            await store.write("op_7", admit("op_7"))
            assert await next_rows(watch, until=11) == [("op_7", 11, RowState.ACCEPTED)]
            resumed = service.watch(4)  # a new stream from a cursor: what SQL has after it
            assert await next_rows(resumed, until=11) == as_seen(sql_changes(path, 4))
            service.end_watches()

    asyncio.run(main())


def test_a_write_whose_waiter_was_cancelled_before_it_ran_leaves_memory_reads_on(
    tmp_path: Path,
) -> None:
    """Issue 10 regression: a write queued behind a busy thread whose waiter is cancelled
    never runs; its pending count must still drop, or every later changes_after would
    bypass memory for good (slower, found in review)."""
    path = tmp_path / "r.db"

    async def main() -> None:
        async with opened(path) as store:
            written = await store.write("op_1", admit("op_1"))
            with write_lock_held(path):
                pending = await busy_thread(store)
                doomed = asyncio.ensure_future(store.write("op_2", admit("op_2")))
                await asyncio.sleep(0)  # queued behind the blocked floor write
                doomed.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await doomed
            await pending
            # Memory answers on the loop again: even with the thread blocked once more.
            with write_lock_held(path):
                blocked = await busy_thread(store)
                assert await asyncio.wait_for(store.changes_after(0), SOON) == [written]
                assert await asyncio.wait_for(store.get("op_1"), SOON) == written
            await blocked

    asyncio.run(main())


@pytest.mark.rule("C9", "C10")
def test_a_replay_past_a_whole_batch_of_rows_it_does_not_send_moves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C9/C10: a watch that replays from its cursor and reads a whole batch of rows it
    does not send (released ones) moves its cursor past them and reads on, to the
    rows it sends and then to live changes. Regression: it read the same batch again
    forever, and from memory that never yields, so the runner's loop stopped serving
    anything (seen under bench/coordinator_ab.py: 16 Dispatches that never arrived,
    after a round in which every change was held or released)."""
    monkeypatch.setattr(service_watch, "WATCH_BATCH", 3)  # a batch is three rows here
    path = tmp_path / "r.db"

    async def main() -> None:
        async with opened(path, changes_kept=1) as store:  # replays read SQL (awaits)
            for n in range(1, 5):  # four released rows: more than a batch
                op = f"op_{n}"
                await store.write(op, admit(op))
                await store.write(op, Settle(A, RowState.CANCELLED, Execution.NOT_STARTED, 1.0))
                await store.write(op, Release())
            await store.write("op_5", admit("op_5"))
            service = service_on(store)
            watch = service.watch(0)
            assert await next_rows(watch, until=13) == [("op_5", 13, RowState.ACCEPTED)]
            await store.write("op_6", admit("op_6"))
            assert await next_rows(watch, until=14) == [("op_6", 14, RowState.ACCEPTED)]
            service.end_watches()

    asyncio.run(main())
