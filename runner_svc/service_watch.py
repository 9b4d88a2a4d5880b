"""WatchOperations for the runner service: every row change after a cursor, then
live ones, with heartbeats (C9). Split from runner_svc.service; the service
decides which rows a watch sends and how a row is shown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from runner_svc.core.model import OperationRow, Refusal, RunnerRefusal
from runner_svc.service_types import STORE_UNREADABLE, OperationView
from runner_svc.storage.async_store import AsyncRunnerStore
from runner_svc.storage.sqlite_store import StoreError

# The service's logger: a watch's store failure reads like the service's others.
log = logging.getLogger("runner_svc.service")

# Rows a watch replays per read of the store.
WATCH_BATCH = 500


async def watch_changes(
    store: AsyncRunnerStore,
    after_sequence: int,
    *,
    buffer: int,
    heartbeat_seconds: float,
    sends: Callable[[OperationRow], bool],
    view: Callable[[OperationRow], OperationView],
    closing: Callable[[], bool],
) -> AsyncIterator[OperationView | None]:
    """Every row change after the cursor that ``sends`` lets through, then live
    ones, until ``closing()``; None is a heartbeat.

    Live changes are pushed by the store (AsyncRunnerStore.subscribe), so a
    write costs a watcher no read. The store is read only to replay from
    the cursor at the start, and again whenever the feed overflowed (a slow
    consumer): from memory while the cursor is in the store's window of
    recent changes, else from SQL.
    """
    cursor = after_sequence
    opening = True
    # Subscribed before the first read: a change lands in the read, the feed or both.
    with store.subscribe(buffer, sends) as feed:
        replaying = True
        while not closing():
            if replaying or feed.behind:
                feed.restart()  # what it held is in this read
                rows = await _changes_after(store, cursor)
                replaying = len(rows) >= WATCH_BATCH  # more may follow
            else:
                rows = feed.take()
            sent = False
            for row in rows:
                # A pushed row at or below the cursor was in a read already.
                if row.sequence <= cursor:
                    continue
                # The cursor moves past rows the watch does not send too: a
                # replay whose whole batch is such rows must read on, not
                # read that batch again forever.
                cursor = row.sequence
                if sends(row):
                    sent = True
                    yield view(row)
            if opening and not sent:
                yield None  # a stream with nothing to replay opens with a heartbeat
            opening = False
            if replaying and not sent:
                # A long run of rows it does not send, read from memory, would
                # otherwise hold the loop for every batch of it.
                await asyncio.sleep(0)
            if replaying or feed.behind or sent:
                continue
            try:
                # Not wait_for: on 3.11 it can swallow the cancel of a closed stream.
                async with asyncio.timeout(heartbeat_seconds):
                    await feed.wait()
            except TimeoutError:
                yield None


async def _changes_after(store: AsyncRunnerStore, cursor: int) -> list[OperationRow]:
    try:
        return await store.changes_after(cursor, WATCH_BATCH)
    except StoreError as exc:
        log.error("store read failed for a watch after %d: %s", cursor, exc)
        raise RunnerRefusal(Refusal.STORE_UNAVAILABLE, STORE_UNREADABLE) from exc
