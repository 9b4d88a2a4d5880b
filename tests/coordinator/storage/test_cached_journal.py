"""The write-through cache (storage/cached.py): answers from memory what this process
wrote, never an older row than the database holds, and stays bounded.

The journal behind it is a real SQLite file; a counting pass-through (not a
mock: every call reaches the real journal) shows which reads reached it. The
full contract suite also runs on the cached stack (conftest: cached-sqlite).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator_svc.core.model import AttemptOutcome, AttemptUpdate, OpState
from coordinator_svc.ports import Journal, StaleVersion
from coordinator_svc.storage import migrate, open_journal
from coordinator_svc.storage.cached import CachedJournal
from tests.coordinator.storage.records import (
    bookkeeping,
    dispatch,
    first_event,
    new_operation,
    transition,
)


class Counted:
    """Passes every call to the real journal and counts the reads by name."""

    def __init__(self, inner: Journal) -> None:
        self.inner = inner
        self.reads: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if name in ("get", "get_for_principal", "events", "attempts"):

            async def counted(*args: Any, **kwargs: Any) -> Any:
                self.reads[name] += 1
                return await value(*args, **kwargs)

            return counted
        return value


def _run(
    tmp_path: Path, scenario: Callable[[CachedJournal, Counted, Journal], Awaitable[None]]
) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    migrate(url)

    async def main() -> None:
        real = open_journal(url)
        other = open_journal(url)  # a second handle: the "someone else" of these tests
        counted = Counted(real)
        cached = CachedJournal(counted)  # type: ignore[arg-type]  # Counted forwards the port
        try:
            await scenario(cached, counted, other)
        finally:
            await cached.close()
            await other.close()

    asyncio.run(main())


@pytest.mark.rule("C13")
def test_reads_of_what_it_wrote_come_from_memory_and_match_the_database(
    tmp_path: Path,
) -> None:
    """C13, issue 10: after submit and commits, get/events/attempts reach no database,
    and return exactly what the database holds."""

    async def scenario(cached: CachedJournal, counted: Counted, other: Journal) -> None:
        operation = new_operation(1)
        stored, _ = await cached.submit(operation, first_event(operation))
        dispatching = await cached.commit(dispatch(stored))
        done = await cached.commit(
            transition(
                dispatching,
                OpState.SUCCEEDED,
                attempt_updates=(AttemptUpdate(1, AttemptOutcome.ACCEPTED, "ok"),),
            )
        )
        op_id = operation.operation_id
        from_memory = (
            await cached.get(op_id),
            await cached.get_for_principal(operation.principal, op_id),
            await cached.events(op_id, 0, 100),
            await cached.events(op_id, 1, 1),
            await cached.attempts(op_id),
        )
        assert counted.reads == {}
        from_database = (
            await other.get(op_id),
            await other.get_for_principal(operation.principal, op_id),
            await other.events(op_id, 0, 100),
            await other.events(op_id, 1, 1),
            await other.attempts(op_id),
        )
        assert from_memory == from_database
        assert from_memory[0] == done
        assert await cached.get_for_principal("someone-else", op_id) is None

    _run(tmp_path, scenario)


@pytest.mark.rule("C4")
def test_a_write_by_someone_else_is_refused_and_the_next_read_goes_to_the_database(
    tmp_path: Path,
) -> None:
    """C4: the CAS still guards: a commit from a stale cached row raises StaleVersion,
    and the read after it returns the row the other writer stored."""

    async def scenario(cached: CachedJournal, counted: Counted, other: Journal) -> None:
        operation = new_operation(1)
        stored, _ = await cached.submit(operation, first_event(operation))
        theirs = await other.commit(bookkeeping(stored, cancel_requested=True))
        with pytest.raises(StaleVersion):
            await cached.commit(dispatch(stored))
        assert await cached.get(operation.operation_id) == theirs
        assert counted.reads["get"] == 1
        ours = await cached.commit(dispatch(theirs))
        assert await other.get(operation.operation_id) == ours
        assert await cached.attempts(operation.operation_id) == await other.attempts(
            operation.operation_id
        )

    _run(tmp_path, scenario)


class HeldReads(Counted):
    """Like Counted, but a get() that read the database waits for ``release``
    before it returns: the read is overtaken by whatever runs meanwhile."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.release = asyncio.Event()
        self.read_done = asyncio.Event()

    async def get(self, operation_id: str) -> Any:
        found = await self.inner.get(operation_id)
        self.read_done.set()
        await self.release.wait()
        return found


@pytest.mark.rule("C4")
def test_a_read_that_raced_a_commit_never_puts_an_older_row_back(tmp_path: Path) -> None:
    """C4, issue 10: a database read that finished before a commit but returned after
    it cannot replace the newer row in memory (the cache only moves forward by version)."""
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    migrate(url)

    async def main() -> None:
        real = open_journal(url)
        held = HeldReads(real)
        cached = CachedJournal(held)  # type: ignore[arg-type]  # HeldReads forwards the port
        try:
            operation = new_operation(1)
            stored, _ = await real.submit(operation, first_event(operation))
            read = asyncio.ensure_future(cached.get(operation.operation_id))
            await held.read_done.wait()  # it holds version 1 now
            newer = await cached.commit(dispatch(stored))
            held.release.set()
            assert (await read).version == 1
            assert await cached.get(operation.operation_id) == newer
            assert newer == await real.get(operation.operation_id)
        finally:
            await cached.close()

    asyncio.run(main())


def test_memory_is_bounded_by_count_and_by_bytes(tmp_path: Path) -> None:
    """Memory stays bounded: at most ``capacity`` operations and about ``max_bytes``
    of envelopes and results (least recently used goes first); a record bigger than
    the whole budget is not kept; whatever left memory is read from the database."""
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    migrate(url)

    async def main() -> None:
        by_count = CachedJournal(open_journal(url), capacity=3)
        by_bytes = CachedJournal(open_journal(url), max_bytes=3 * 2048)
        try:
            records = []
            for number in range(1, 6):
                operation = new_operation(number)
                stored, _ = await by_count.submit(operation, first_event(operation))
                records.append(stored)
            assert by_count.cached == 3
            cancelled = await by_count.commit(transition(records[-1], OpState.CANCELLED))
            await by_count.commit(bookkeeping(cancelled, released=True))
            assert by_count.cached == 3  # a recent terminal stays (its watchers read it)
            assert await by_count.get(records[0].operation_id) == records[0]

            for record in records:
                await by_bytes.get(record.operation_id)
            assert 0 < by_bytes.cached_bytes <= 3 * 2048
            big = dataclasses.replace(new_operation(9), envelope=b"x" * 10_000)
            stored, _ = await by_bytes.submit(big, first_event(big))
            assert by_bytes.cached_bytes <= 3 * 2048
            assert await by_bytes.get(big.operation_id) == stored  # from the database
        finally:
            await by_count.close()
            await by_bytes.close()

    asyncio.run(main())


def test_a_failed_commit_leaves_nothing_cached_for_that_operation(tmp_path: Path) -> None:
    """Fail closed: after a write that failed (here a rule refusal), the next read of
    that operation asks the database instead of trusting memory."""

    async def scenario(cached: CachedJournal, counted: Counted, other: Journal) -> None:
        operation = new_operation(1)
        stored, _ = await cached.submit(operation, first_event(operation))
        bad = dataclasses.replace(dispatch(stored), event=None)  # a state change needs an event
        with pytest.raises(ValueError):
            await cached.commit(bad)
        assert await cached.get(operation.operation_id) == stored
        assert counted.reads["get"] == 1

    _run(tmp_path, scenario)


@pytest.mark.rule("O5")
def test_events_or_attempts_read_past_the_cached_row_drop_it(tmp_path: Path) -> None:
    """§5 O5: a watch sends each event with the record read after it (CI, stop 22): once the
    database shows events or attempts the cached row does not count (another writer
    committed, unannounced yet), the next get reads the database, not that row."""

    async def scenario(cached: CachedJournal, counted: Counted, other: Journal) -> None:
        operation = new_operation(1)
        stored, _ = await other.submit(operation, first_event(operation))
        op_id = operation.operation_id
        assert await cached.get(op_id) == stored  # held: the record only
        theirs = await other.commit(dispatch(stored))  # an event and an attempt past it
        events = await cached.events(op_id, stored.last_event_sequence, 10)
        assert [event.sequence for event in events] == [theirs.last_event_sequence]
        assert await cached.get(op_id) == theirs
        # The same for attempts (the dispatcher reads them after the record).
        second = new_operation(2)
        held, _ = await other.submit(second, first_event(second))
        assert await cached.get(second.operation_id) == held
        dispatched = await other.commit(dispatch(held))
        assert len(await cached.attempts(second.operation_id)) == 1
        assert await cached.get(second.operation_id) == dispatched

    _run(tmp_path, scenario)
