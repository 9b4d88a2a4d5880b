"""Group commit for the journal on its one SQLite writer thread (issue 10).

Writes that arrive while a batch of writes is with the database wait and
then go together, on one connection: one BEGIN, each write in its own
SAVEPOINT, one COMMIT (one fsync).
Writes issued in one turn of the event loop go together too; reads are
not batched (they run on the worker threads as before, after the writes
queued ahead of them).
Every write keeps its own outcome: one that fails (a compare-and-set
conflict, a reused idempotency key, a database error inside it) is rolled
back to its savepoint and raises for its caller alone; a COMMIT that fails
fails them all; nothing is reported before the COMMIT. A write that comes
alone runs exactly as without batching.

The journal's rules are unchanged by this: each write still sees everything
committed or written before it (the batch is one transaction, in arrival
order), and a caller learns "committed" only once it is durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

Work = Callable[[Any], Any]
# One write's result: (True, its value) or (False, the exception its caller gets).
Outcome = tuple[bool, Any]


class GroupCommit:
    """Queues writes on the loop and hands them to the writer thread in batches."""

    def __init__(
        self, executor: Executor, run_batch: Callable[[Sequence[Work]], list[Outcome]]
    ) -> None:
        self._executor = executor
        self._run_batch = run_batch
        self._pending: list[tuple[Work, asyncio.Future[Any]]] = []
        self._scheduled = False
        self._out = 0  # batches with the writer thread

    async def write(self, work: Work) -> Any:
        """``work(cursor)``'s value once its transaction committed; raises what it raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((work, future))
        if not self._scheduled and not self._out:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await future

    def flush(self) -> None:
        """Hand the queued writes to the thread now (before a read queued after them)."""
        self._flush()

    def _flush(self) -> None:
        self._scheduled = False
        batch, self._pending = self._pending, []
        if not batch:
            return
        try:
            job = asyncio.get_running_loop().run_in_executor(
                self._executor, self._run_batch, [work for work, _ in batch]
            )
        except BaseException as exc:  # the executor is shut down: none of them ran
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        self._out += 1
        job.add_done_callback(lambda done: self._landed(batch, done))

    def _landed(
        self, batch: list[tuple[Work, asyncio.Future[Any]]], job: asyncio.Future[list[Outcome]]
    ) -> None:
        self._out -= 1
        if self._pending and not self._out:
            self._flush()  # what queued meanwhile goes next, together
        error = None if job.cancelled() else job.exception()
        if job.cancelled() or error is not None:
            for _, future in batch:
                if not future.done():
                    future.set_exception(error or asyncio.CancelledError())
            return
        for (_, future), (ok, value) in zip(batch, job.result(), strict=True):
            if future.done():
                continue  # its caller stopped waiting (it reloads: the write may have landed)
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
