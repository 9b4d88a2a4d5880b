"""PostgreSQL's one-statement submit and commit (issue 10, single_statement.py).

A write is one statement on the autocommit connection, with no BEGIN to find
a dead connection before anything is sent. When the connection dies with the
statement sent, nobody can say whether the server ran it: the journal runs it
once more on a fresh connection, and that run must recognise the write as its
own if it landed, never answer a conflict or a replay for it. These tests
lose exactly that reply, through a TCP proxy in front of the real server
(tests/support/tcp_cut.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

from coordinator_svc.core.model import AttemptOutcome, AttemptUpdate, OpState
from coordinator_svc.ports import InvalidWrite, StaleVersion
from coordinator_svc.storage import open_journal
from coordinator_svc.storage.sql import SqlJournal
from tests.coordinator.storage.conftest import emptied
from tests.coordinator.storage.records import (
    dispatch,
    first_event,
    new_operation,
    transition,
)
from tests.support.tcp_cut import TcpCutProxy

pytestmark = pytest.mark.postgres

T = TypeVar("T")


@pytest.fixture
def postgres_url(module_postgres_journal: str) -> Iterator[str]:
    yield emptied(module_postgres_journal)


def through_proxy(
    url: str, scenario: Callable[[SqlJournal, TcpCutProxy, SqlJournal], Awaitable[T]]
) -> T:
    """``scenario(journal through the proxy, the proxy, a journal straight to the server)``."""
    parsed = sa.make_url(url)

    async def main() -> T:
        proxy = await TcpCutProxy.start(parsed.host or "127.0.0.1", parsed.port or 5432)
        # open_journal blocks; this loop must keep serving the proxy meanwhile.
        journal = await asyncio.to_thread(
            open_journal, parsed.set(port=proxy.port).render_as_string(False)
        )
        direct = open_journal(url)
        try:
            return await scenario(journal, proxy, direct)
        finally:
            await journal.close()
            await direct.close()
            await proxy.stop()

    return asyncio.run(main())


@pytest.mark.rule("C1")
def test_a_submit_whose_reply_was_lost_is_its_own_write_not_a_replay(postgres_url: str) -> None:
    """C1: the insert landed, its reply was lost and the connection cut: the rerun finds
    the operation under its key with this submit's own id, and answers "new", once."""

    async def scenario(journal: SqlJournal, proxy: TcpCutProxy, direct: SqlJournal) -> None:
        warm = new_operation(1)
        await journal.submit(warm, first_event(warm))  # the kept connection exists
        operation = new_operation(2)
        proxy.lose_next_reply(b"WITH made AS")
        stored, replayed = await journal.submit(operation, first_event(operation))
        assert proxy.replies_lost == 1
        assert replayed is False
        assert stored.operation_id == operation.operation_id
        assert len(await direct.events(operation.operation_id, 0, 10)) == 1
        assert journal.commits == 2
        # A client's true replay (a new id, the same key) is still a replay.
        again = dataclasses.replace(new_operation(2), operation_id="op-replay")
        existing, replayed = await journal.submit(again, first_event(again))
        assert replayed is True and existing.operation_id == operation.operation_id

    through_proxy(postgres_url, scenario)


@pytest.mark.rule("C4")
def test_a_commit_whose_reply_was_lost_is_its_own_write_not_a_conflict(postgres_url: str) -> None:
    """C4, §5: the write-ahead landed, its reply was lost and the connection cut: the
    rerun's compare-and-set matches nothing, and it finds the row it meant to write:
    success, one event, one attempt; no StaleVersion that would leave the turn waiting."""

    async def scenario(journal: SqlJournal, proxy: TcpCutProxy, direct: SqlJournal) -> None:
        operation = new_operation(1)
        stored, _ = await journal.submit(operation, first_event(operation))
        proxy.lose_next_reply(b"WITH changed AS")
        written = await journal.commit(dispatch(stored))
        assert proxy.replies_lost == 1
        assert written.state == OpState.DISPATCHING
        assert await direct.get(stored.operation_id) == written
        assert [e.to_state for e in await direct.events(stored.operation_id, 0, 10)] == [
            OpState.QUEUED,
            OpState.DISPATCHING,
        ]
        assert len(await direct.attempts(stored.operation_id)) == 1
        # The next commit builds on it as on any other.
        running = await journal.commit(
            transition(
                written,
                OpState.RUNNING,
                attempt_updates=(AttemptUpdate(1, AttemptOutcome.ACCEPTED, "ok"),),
            )
        )
        assert running.state == OpState.RUNNING

    through_proxy(postgres_url, scenario)


def test_the_same_row_from_a_stale_before_is_a_conflict_on_a_first_run(postgres_url: str) -> None:
    """§5 (no double dispatch): a second writer holding the same old row computes the very
    row the first one wrote; the compare-and-set refuses it, and equality is no excuse."""

    def scenario(journal: SqlJournal) -> Awaitable[None]:
        async def run() -> None:
            operation = new_operation(1)
            stored, _ = await journal.submit(operation, first_event(operation))
            change = dispatch(stored)
            await journal.commit(change)
            with pytest.raises(StaleVersion):
                await journal.commit(change)

        return run()

    async def main() -> None:
        journal = open_journal(postgres_url)
        try:
            await scenario(journal)
        finally:
            await journal.close()

    asyncio.run(main())


@pytest.mark.rule("C4")
def test_closing_an_attempt_whose_row_is_missing_writes_nothing(postgres_url: str) -> None:
    """C4, fail closed: the rules allow closing attempt 1, but its row was deleted by hand;
    the statement's CAS requires the row, so the commit is InvalidWrite and the operation,
    its events and its attempts are as they were."""
    import psycopg

    dsn = sa.make_url(postgres_url).set(drivername="postgresql").render_as_string(False)

    async def main() -> None:
        journal = open_journal(postgres_url)
        try:
            operation = new_operation(1)
            stored, _ = await journal.submit(operation, first_event(operation))
            dispatched = await journal.commit(dispatch(stored))
            with psycopg.connect(dsn, autocommit=True) as damage:
                damage.execute(
                    "DELETE FROM attempts WHERE operation_id = %s", (stored.operation_id,)
                )
            before: Any = (
                await journal.get(stored.operation_id),
                await journal.events(stored.operation_id, 0, 10),
                await journal.attempts(stored.operation_id),
            )
            change = transition(
                dispatched,
                OpState.RUNNING,
                attempt_updates=(AttemptUpdate(1, AttemptOutcome.ACCEPTED, "ok"),),
            )
            with pytest.raises(InvalidWrite, match="no attempt 1"):
                await journal.commit(change)
            after = (
                await journal.get(stored.operation_id),
                await journal.events(stored.operation_id, 0, 10),
                await journal.attempts(stored.operation_id),
            )
            assert after == before
        finally:
            await journal.close()

    asyncio.run(main())


@pytest.mark.rule("C4")
def test_a_pipeline_whose_reply_was_lost_lands_each_write_once(postgres_url: str) -> None:
    """C4, §5: writes queued together went in one pipeline; it committed, its reply was
    lost and the connection cut. The pipeline runs again on a fresh connection and each
    write recognises its own row: all succeed, each once."""

    async def scenario(journal: SqlJournal, proxy: TcpCutProxy, direct: SqlJournal) -> None:
        stored = []
        for number in range(1, 4):
            operation = new_operation(number)
            stored.append((await journal.submit(operation, first_event(operation)))[0])
        proxy.lose_next_reply(b"WITH changed AS")
        written = await asyncio.gather(*(journal.commit(dispatch(record)) for record in stored))
        assert proxy.replies_lost == 1
        for record, after in zip(stored, written, strict=True):
            assert after.state == OpState.DISPATCHING
            assert await direct.get(record.operation_id) == after
            assert len(await direct.events(record.operation_id, 0, 10)) == 2
            assert len(await direct.attempts(record.operation_id)) == 1

    through_proxy(postgres_url, scenario)


@pytest.mark.rule("C4")
def test_a_read_after_a_pipeline_that_fails_is_journal_unavailable(postgres_url: str) -> None:
    """C4, fail closed: a pipeline committed; one of its writes lost its compare-and-set and the
    read that names why dies with the connection. That write's caller gets
    JournalUnavailable (typed, never a driver error); the other write landed."""
    from coordinator_svc.ports import JournalUnavailable

    async def scenario(journal: SqlJournal, proxy: TcpCutProxy, direct: SqlJournal) -> None:
        one, two = new_operation(1), new_operation(2)
        stored_one, _ = await journal.submit(one, first_event(one))
        stored_two, _ = await journal.submit(two, first_event(two))
        stale = dispatch(stored_two)
        await journal.commit(stale)
        proxy.lose_next_reply(b"FROM operations WHERE operation_id = $1")
        results = await asyncio.gather(
            journal.commit(dispatch(stored_one)), journal.commit(stale), return_exceptions=True
        )
        assert proxy.replies_lost == 1
        assert not isinstance(results[0], BaseException) and results[0].state is OpState.DISPATCHING
        assert isinstance(results[1], JournalUnavailable), results
        assert await direct.get(one.operation_id) == results[0]

    through_proxy(postgres_url, scenario)


def test_a_lost_compare_and_set_stays_lost_when_the_read_after_it_dies(
    postgres_url: str,
) -> None:
    """§5 (no double dispatch): a change committed before is sent again alone; its
    compare-and-set answers "no row" (a definite answer: it wrote nothing), then the
    connection dies during the read that names why. The write runs again on a fresh
    connection, but its first run was answered, so the row it finds is not taken for
    its own: StaleVersion, as without the fault."""

    async def scenario(journal: SqlJournal, proxy: TcpCutProxy, direct: SqlJournal) -> None:
        operation = new_operation(1)
        stored, _ = await journal.submit(operation, first_event(operation))
        change = dispatch(stored)
        await journal.commit(change)
        proxy.lose_next_reply(b"FROM operations WHERE operation_id = $1")
        with pytest.raises(StaleVersion):
            await journal.commit(change)
        assert proxy.replies_lost == 1
        assert len(await direct.attempts(stored.operation_id)) == 1

    through_proxy(postgres_url, scenario)
