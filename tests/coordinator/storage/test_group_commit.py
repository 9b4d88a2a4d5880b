"""Group commit on the SQLite journal (issue 10): writes that queue together share
one transaction, and each keeps its own outcome. On PostgreSQL each write is one
statement with no BEGIN or COMMIT (single_statement.py), and those queued together
go in one pipeline, one transaction; the same outcomes hold there.

A real SQLite journal file and a real PostgreSQL database. The transactions are
counted by the real backend with its COMMIT counted on the way (a subclass that
only counts, then commits).
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from coordinator_svc.core.model import OperationRecord, OpState
from coordinator_svc.dispatcher.first_attempt import write_together
from coordinator_svc.ports import IdempotencyKeyReused, InvalidWrite, StaleVersion
from coordinator_svc.storage import migrate, open_journal
from coordinator_svc.storage.backends import PostgresBackend, SqliteBackend
from coordinator_svc.storage.sql import SqlJournal
from tests.coordinator.storage.conftest import emptied
from tests.coordinator.storage.records import T0, bookkeeping, dispatch, first_event, new_operation


class Counting:
    """Counts the transactions the real backend commits."""

    commits = 0

    def commit(self, cursor: Any) -> None:
        super().commit(cursor)  # type: ignore[misc]
        self.commits += 1


class CountingSqlite(Counting, SqliteBackend):
    pass


class CountingPostgres(Counting, PostgresBackend):
    pass


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'journal.db'}"
        migrate(url)
        return url
    return emptied(request.getfixturevalue("module_postgres_journal"))


def counted_journal(url: str) -> tuple[SqlJournal, Counting]:
    journal = open_journal(url)
    counting: Counting = CountingSqlite() if url.startswith("sqlite") else CountingPostgres()
    journal._backend = counting  # type: ignore[assignment]
    return journal, counting


@pytest.mark.rule("C1", "C13")
def test_writes_that_queue_together_share_one_transaction(journal_url: str) -> None:
    """C1, C13: eight submits at once: every one stored with its first event, on SQLite in fewer
    transactions (fsyncs) than writes."""

    async def main() -> None:
        journal, counting = counted_journal(journal_url)
        try:
            operations = [new_operation(n) for n in range(1, 9)]
            results = await asyncio.gather(
                *(journal.submit(op, first_event(op)) for op in operations)
            )
            assert [replayed for _, replayed in results] == [False] * 8
            for op in operations:
                assert await journal.get(op.operation_id) is not None
                assert len(await journal.events(op.operation_id, 0, 10)) == 1
            if journal.backend_name == "sqlite":
                assert counting.commits <= 2  # the first may go alone; the rest queued behind it
            else:
                assert counting.commits == 0  # eight one-statement transactions, no COMMIT
            assert journal.commits == 8  # each write still counts as its own commit
        finally:
            await journal.close()

    asyncio.run(main())


def test_a_write_that_fails_in_a_shared_transaction_fails_alone(journal_url: str) -> None:
    """§5: a stale compare-and-set between two good writes raises StaleVersion for its
    caller only; the writes around it land, in the one transaction (a batch runs in
    arrival order: on SQLite in savepoints, on PostgreSQL in one pipeline)."""

    async def main() -> None:
        journal, counting = counted_journal(journal_url)
        try:
            one, two = new_operation(1), new_operation(2)
            stored_one, _ = await journal.submit(one, first_event(one))
            stored_two, _ = await journal.submit(two, first_event(two))
            before = counting.commits
            results = await asyncio.gather(
                journal.commit(bookkeeping(stored_one, next_action_at=T0)),
                journal.commit(dispatch(stored_one)),  # from the version the first moves on
                journal.commit(dispatch(stored_two)),
                return_exceptions=True,
            )
            kept, stale, dispatched = results
            assert isinstance(stale, StaleVersion)
            if journal.backend_name == "sqlite":
                assert counting.commits - before == 1
            else:
                # Rows one transaction wrote carry its id (xmin).
                assert len(set(postgres_xmins(journal_url, [one, two]))) == 1
            assert await journal.get(one.operation_id) == kept
            assert await journal.attempts(one.operation_id) == []
            assert len(await journal.events(one.operation_id, 0, 10)) == 1
            assert await journal.get(two.operation_id) == dispatched
            assert len(await journal.attempts(two.operation_id)) == 1
        finally:
            await journal.close()

    asyncio.run(main())


@pytest.mark.rule("C4")
@pytest.mark.postgres
def test_a_statement_that_fails_in_a_pipeline_fails_alone(
    module_postgres_journal: str,
) -> None:
    """C4, fail closed: a write whose statement the server refuses (its attempt row exists
    already: damaged by hand) rolls back the pipeline it shared; every other write of it
    runs again alone and gets its own answer (lands once, or StaleVersion); the refused
    one is JournalUnavailable and wrote nothing."""
    import psycopg

    from coordinator_svc.ports import JournalUnavailable

    url = emptied(module_postgres_journal)

    async def main() -> None:
        journal, _ = counted_journal(url)
        try:
            ops = [new_operation(n) for n in range(1, 4)]
            stored = [(await journal.submit(op, first_event(op)))[0] for op in ops]
            dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(False)
            with psycopg.connect(dsn, autocommit=True) as damage:
                damage.execute(
                    "INSERT INTO attempts SELECT operation_id, 1, 'r', 'i', NULL, now(),"
                    " 'SENT', '' FROM operations WHERE operation_id = %s",
                    (ops[1].operation_id,),
                )
            # A change already committed, sent again: the very row it would write exists.
            again = dispatch(stored[2])
            await journal.commit(again)
            results = await asyncio.gather(
                journal.commit(dispatch(stored[0])),
                journal.commit(dispatch(stored[1])),
                journal.commit(again),
                return_exceptions=True,
            )
            assert results[0].state is OpState.DISPATCHING  # type: ignore[union-attr]
            assert len(await journal.attempts(ops[0].operation_id)) == 1
            assert len(await journal.events(ops[0].operation_id, 0, 10)) == 2
            assert isinstance(results[1], JournalUnavailable), results
            assert await journal.get(ops[1].operation_id) == stored[1]
            assert len(await journal.events(ops[1].operation_id, 0, 10)) == 1
            # Rolled back with the pipeline, its run does not count: alone it is a first
            # run, so the row it finds is not taken for its own (§5: no double dispatch).
            assert isinstance(results[2], StaleVersion), results
        finally:
            await journal.close()

    asyncio.run(main())


def postgres_xmins(url: str, operations: list[Any]) -> list[int]:
    import psycopg

    dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(dsn, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT xmin::text FROM operations WHERE operation_id = ANY(%s)",
            ([op.operation_id for op in operations],),
        ).fetchall()
    return [int(row[0]) for row in rows]


@pytest.mark.rule("C1")
def test_a_reused_key_in_a_shared_transaction_is_refused_alone(journal_url: str) -> None:
    """C1: two submits of one key with different requests, queued together: one is
    stored, the other refused (IdempotencyKeyReused) and stores nothing (on SQLite the
    first, in arrival order; on PostgreSQL whichever commits first)."""

    async def main() -> None:
        journal, _ = counted_journal(journal_url)
        try:
            first = new_operation(1, key="same")
            second = new_operation(2, key="same", request="another request")
            results = await asyncio.gather(
                journal.submit(first, first_event(first)),
                journal.submit(second, first_event(second)),
                return_exceptions=True,
            )
            refused = [n for n, r in enumerate(results) if isinstance(r, IdempotencyKeyReused)]
            assert len(refused) == 1, results
            if journal.backend_name == "sqlite":
                assert refused == [1]
            stored = results[1 - refused[0]]
            assert not isinstance(stored, BaseException) and stored[1] is False
            loser = (first, second)[refused[0]]
            assert await journal.get(loser.operation_id) is None
        finally:
            await journal.close()

    asyncio.run(main())


@pytest.mark.rule("C1")
def test_a_closed_journal_refuses_writes(journal_url: str) -> None:
    """C1, fail closed: after close, a write is refused (JournalUnavailable), not queued
    forever."""
    from coordinator_svc.ports import JournalUnavailable

    async def main() -> None:
        journal, _ = counted_journal(journal_url)
        await journal.close()
        op = new_operation(1)
        with pytest.raises(JournalUnavailable):
            await asyncio.wait_for(journal.submit(op, first_event(op)), 5)

    asyncio.run(main())


@pytest.mark.rule("C1")
def test_writes_queued_when_the_journal_closes_finish(tmp_path: Path) -> None:
    """C1: close lets the writes in flight finish: ones queued for the next batch (not yet
    handed to the writer thread) land too, and are not failed with a stray error."""

    async def main() -> None:
        url = f"sqlite:///{tmp_path / 'journal.db'}"
        migrate(url)
        journal, _ = counted_journal(url)
        operations = [new_operation(n) for n in range(1, 5)]
        writes = [asyncio.ensure_future(journal.submit(op, first_event(op))) for op in operations]
        await asyncio.sleep(0)  # queued on the group, none handed to the thread yet
        await journal.close()
        results = await asyncio.gather(*writes)
        assert [replayed for _, replayed in results] == [False] * 4
        reopened = open_journal(url)
        try:
            for op in operations:
                assert await reopened.get(op.operation_id) is not None
        finally:
            await reopened.close()

    asyncio.run(main())


def postgres_row_xmins(url: str, operation_id: str) -> list[int]:
    """The transaction ids of the operation's row, its events and its attempts."""
    import psycopg

    dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(dsn, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT xmin::text FROM operations WHERE operation_id = %(id)s"
            " UNION ALL SELECT xmin::text FROM events WHERE operation_id = %(id)s"
            " UNION ALL SELECT xmin::text FROM attempts WHERE operation_id = %(id)s",
            {"id": operation_id},
        ).fetchall()
    return [int(row[0]) for row in rows]


@pytest.mark.rule("C1a")
def test_an_acceptance_and_its_first_attempt_queued_together_are_one_transaction(
    journal_url: str,
) -> None:
    """C1a: the submit and the write-ahead of the turn's first attempt, queued as the
    dispatcher queues them (first_attempt.write_together), land in one transaction:
    on SQLite one COMMIT, on PostgreSQL one pipeline (the operation's row, its two
    events and its attempt carry one transaction id). A replayed key stores nothing
    of the new turn: its attempt finds no row (InvalidWrite), the stored turn is
    untouched."""

    async def main() -> None:
        journal, counting = counted_journal(journal_url)
        try:
            op = dataclasses.replace(new_operation(1), last_event_sequence=1)
            before = counting.commits
            submitted, written = await write_together(
                op, first_event(op), journal.submit, journal.commit, dispatch(op)
            )
            assert not isinstance(submitted, BaseException) and submitted[1] is False
            assert isinstance(written, OperationRecord)
            assert written.state is OpState.DISPATCHING and written.attempt_count == 1
            events = await journal.events(op.operation_id, 0, 10)
            assert [e.to_state for e in events] == [OpState.QUEUED, OpState.DISPATCHING]
            assert len(await journal.attempts(op.operation_id)) == 1
            if journal.backend_name == "sqlite":
                assert counting.commits - before == 1
            else:
                xmins = postgres_row_xmins(journal_url, op.operation_id)
                assert len(xmins) == 4 and len(set(xmins)) == 1, xmins

            again = new_operation(2, key="key-1", request="request-1")
            again = dataclasses.replace(again, last_event_sequence=1)
            replay, refused = await write_together(
                again, first_event(again), journal.submit, journal.commit, dispatch(again)
            )
            assert not isinstance(replay, BaseException) and replay[1] is True
            assert replay[0].operation_id == op.operation_id
            assert isinstance(refused, InvalidWrite)
            assert await journal.get(again.operation_id) is None
            assert await journal.get(op.operation_id) == written
            assert len(await journal.attempts(op.operation_id)) == 1
        finally:
            await journal.close()

    asyncio.run(main())
