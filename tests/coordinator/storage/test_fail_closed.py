"""Storage failures fail closed: the caller gets JournalUnavailable and nothing is half-written.

Failures are real database failures: a trigger that aborts mid-transaction,
a lock held by another connection, a server that drops the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from coordinator_svc.core.model import OpState
from coordinator_svc.ports import Journal, JournalUnavailable
from coordinator_svc.storage import FakeJournal, migrate, open_journal
from tests.coordinator.storage.records import T0, dispatch, first_event, new_operation, transition

# (statements that make every INSERT into {table} fail, statements that undo it)
FAILING_TRIGGERS = {
    "sqlite": (
        (
            "CREATE TRIGGER fail_{table} BEFORE INSERT ON {table} "
            "BEGIN SELECT RAISE(ABORT, 'simulated storage failure'); END",
        ),
        ("DROP TRIGGER fail_{table}",),
    ),
    "postgresql": (
        (
            "CREATE FUNCTION fail_{table}() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'simulated storage failure'; END $$",
            "CREATE TRIGGER fail_{table} BEFORE INSERT ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION fail_{table}()",
        ),
        ("DROP TRIGGER fail_{table} ON {table}", "DROP FUNCTION fail_{table}()"),
    ),
}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty SQL journal."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'journal.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    migrate(url)
    yield url


def _execute(url: str, statements: tuple[str, ...], table: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.exec_driver_sql(statement.format(table=table))
    finally:
        engine.dispose()


def _failing_inserts(url: str, table: str, *, on: bool) -> None:
    create, drop = FAILING_TRIGGERS[sa.make_url(url).get_backend_name()]
    _execute(url, create if on else drop, table)


async def _snapshot(journal: Journal, operation_id: str) -> tuple[Any, ...]:
    return (
        await journal.get(operation_id),
        await journal.events(operation_id, 0, 100),
        await journal.attempts(operation_id),
    )


def test_fake_marked_unavailable_fails_closed() -> None:
    """Storage: an unavailable fake raises JournalUnavailable everywhere and changes nothing."""

    async def scenario() -> None:
        journal = FakeJournal()
        operation = new_operation(1)
        stored, _ = await journal.submit(operation, first_event(operation))
        before = await _snapshot(journal, stored.operation_id)
        journal.set_available(False)
        other = new_operation(2)
        for call in (
            journal.submit(other, first_event(other)),
            journal.commit(dispatch(stored)),
            journal.claim(stored.operation_id, "a", T0, 10),
            journal.get(stored.operation_id),
            journal.due(T0, 10),
        ):
            with pytest.raises(JournalUnavailable):
                await call
        journal.set_available(True)
        assert await _snapshot(journal, stored.operation_id) == before
        assert await journal.get(other.operation_id) is None

    asyncio.run(scenario())


@pytest.mark.rule("C4", "C13")
def test_commit_failing_mid_transaction_writes_nothing(sql_url: str) -> None:
    """C4/C13: a commit whose last insert fails leaves row, events and attempts as they were."""

    async def scenario() -> None:
        journal = open_journal(sql_url)
        try:
            operation = new_operation(1)
            stored, _ = await journal.submit(operation, first_event(operation))
            before = await _snapshot(journal, stored.operation_id)
            commits = journal.commits
            # The row update and the event insert run first; the attempt insert fails.
            _failing_inserts(sql_url, "attempts", on=True)
            with pytest.raises(JournalUnavailable, match="simulated storage failure"):
                await journal.commit(dispatch(stored))
            assert await _snapshot(journal, stored.operation_id) == before
            assert journal.commits == commits
            _failing_inserts(sql_url, "attempts", on=False)
            recovered = await journal.commit(dispatch(stored))
            assert recovered.state == OpState.DISPATCHING
        finally:
            await journal.close()

    asyncio.run(scenario())


@pytest.mark.rule("C1")
def test_submit_failing_mid_transaction_stores_no_operation(sql_url: str) -> None:
    """C1: if the first event cannot be written, the operation is not accepted either."""

    async def scenario() -> None:
        journal = open_journal(sql_url)
        try:
            operation = new_operation(1)
            _failing_inserts(sql_url, "events", on=True)
            with pytest.raises(JournalUnavailable):
                await journal.submit(operation, first_event(operation))
            assert await journal.get(operation.operation_id) is None
            _failing_inserts(sql_url, "events", on=False)
            _, replay = await journal.submit(operation, first_event(operation))
            assert replay is False
        finally:
            await journal.close()

    asyncio.run(scenario())


def test_sqlite_write_lock_held_elsewhere_fails_closed(tmp_path: Path) -> None:
    """Storage: a write that cannot get SQLite's lock in busy_timeout fails, changing nothing."""
    path = tmp_path / "journal.db"
    migrate(f"sqlite:///{path}")

    async def scenario() -> None:
        journal = open_journal(f"sqlite:///{path}", busy_timeout=0.2)
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            operation = new_operation(1)
            stored, _ = await journal.submit(operation, first_event(operation))
            before = await _snapshot(journal, stored.operation_id)
            holder.execute("BEGIN EXCLUSIVE")
            # Reads take no write lock (WAL + deferred BEGIN), so they still work.
            assert await _snapshot(journal, stored.operation_id) == before
            with pytest.raises(JournalUnavailable, match="locked"):
                await journal.commit(transition(stored, OpState.CANCELLED))
            with pytest.raises(JournalUnavailable, match="locked"):
                await journal.claim(stored.operation_id, "a", T0, 10)
            holder.execute("ROLLBACK")
            assert await _snapshot(journal, stored.operation_id) == before
            done = await journal.commit(transition(stored, OpState.CANCELLED))
            assert done.state == OpState.CANCELLED
        finally:
            holder.close()
            await journal.close()

    asyncio.run(scenario())


@pytest.mark.postgres
def test_postgres_connection_lost_fails_closed(postgres_url: str, postgres_cluster: Any) -> None:
    """Storage: when the server drops and refuses connections, writes and reads raise
    JournalUnavailable; once it is back the journal works and nothing had changed."""
    migrate(postgres_url)
    database = sa.make_url(postgres_url).database

    async def scenario() -> None:
        journal = open_journal(postgres_url, busy_timeout=2)
        try:
            operation = new_operation(1)
            stored, _ = await journal.submit(operation, first_event(operation))
            before = await _snapshot(journal, stored.operation_id)
            postgres_cluster.admin(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
            postgres_cluster.admin(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE datname = '{database}'"
            )
            with pytest.raises(JournalUnavailable):
                await journal.commit(dispatch(stored))
            with pytest.raises(JournalUnavailable):
                await journal.get(stored.operation_id)
            postgres_cluster.admin(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
            assert await _snapshot(journal, stored.operation_id) == before
            assert (await journal.commit(dispatch(stored))).state == OpState.DISPATCHING
        finally:
            await journal.close()

    asyncio.run(scenario())


@pytest.mark.postgres
def test_postgres_row_lock_held_elsewhere_fails_closed(postgres_url: str) -> None:
    """Storage/§5: a row another transaction holds too long fails the write (lock_timeout) and
    is skipped by claim (SKIP LOCKED); nothing changes and the journal works once it is free."""
    import psycopg

    migrate(postgres_url)
    dsn = sa.make_url(postgres_url).set(drivername="postgresql").render_as_string()

    async def scenario() -> None:
        journal = open_journal(postgres_url, busy_timeout=0.3)
        holder = psycopg.connect(dsn)
        try:
            operation = new_operation(1)
            stored, _ = await journal.submit(operation, first_event(operation))
            before = await _snapshot(journal, stored.operation_id)
            holder.execute(
                "SELECT 1 FROM operations WHERE operation_id = %s FOR UPDATE",
                (stored.operation_id,),
            )
            with pytest.raises(JournalUnavailable, match="lock timeout"):
                await journal.commit(transition(stored, OpState.CANCELLED))
            assert await journal.claim(stored.operation_id, "a", T0, 10) is None
            assert await _snapshot(journal, stored.operation_id) == before
            holder.rollback()
            done = await journal.commit(transition(stored, OpState.CANCELLED))
            assert done.state == OpState.CANCELLED
        finally:
            holder.close()
            await journal.close()

    asyncio.run(scenario())


@contextlib.asynccontextmanager
async def _silent_and_other(postgres_url: str) -> AsyncIterator[tuple[str, Any, Any]]:
    """Two replicas' journals (busy timeout 0.3 s: idle-in-transaction timeout 0.6 s)
    and one operation: (its id, a connection from the silent one's pool, the other
    journal). The connection is thrown away at the end (the tests leave it mid-work)."""
    silent = open_journal(postgres_url, busy_timeout=0.3)
    other = open_journal(postgres_url, busy_timeout=0.3)
    try:
        operation = new_operation(1)
        stored, _ = await silent.submit(operation, first_event(operation))
        connection = silent._engine.connect()  # the pool a write would draw from
        try:
            yield stored.operation_id, connection, other
        finally:
            connection.invalidate()
    finally:
        await silent.close()
        await other.close()


@pytest.mark.rule("O3")
@pytest.mark.postgres
def test_postgres_a_transaction_left_open_is_ended_by_the_server_and_its_locks_freed(
    postgres_url: str,
) -> None:
    """§5 O3: a replica cut off from the server between two statements of a write
    (mid lease renewal) must not keep its row locks until TCP keepalive notices:
    the server ends the idle transaction, and another replica's claim, which
    skips locked rows, can then take the operation."""
    migrate(postgres_url)

    async def scenario() -> None:
        async with _silent_and_other(postgres_url) as (operation_id, connection, other):
            connection.exec_driver_sql(
                "SELECT 1 FROM operations WHERE operation_id = %s FOR UPDATE", (operation_id,)
            )
            # Locked now: the other replica's claim passes over the row.
            assert await other.claim(operation_id, "b", T0, 10) is None
            await asyncio.sleep(1.0)  # the process says nothing more (0.6 s allowed)
            claimed = await other.claim(operation_id, "b", T0, 10)
            assert claimed is not None, "the abandoned transaction still holds the row"
            # The silent side's connection was ended: its next word fails, typed.
            with pytest.raises(sa.exc.DBAPIError, match="idle-in-transaction"):
                connection.exec_driver_sql("SELECT 1")

    asyncio.run(scenario())


@pytest.mark.rule("O4")
@pytest.mark.postgres
def test_postgres_a_pipeline_cut_between_statements_keeps_its_locks_past_the_idle_timeout(
    postgres_url: str,
) -> None:
    """§5 O4. Why the journal's sessions also ask the server for TCP keepalive (the next test):
    writes sent together in one pipeline are one implicit transaction, and a client
    silent after its first statement, before the Sync, leaves the server waiting for
    the rest ('active', ClientRead) with the row locked: idle_in_transaction_session_
    timeout does not apply there (stop 23: one operation of a partitioned replica
    stayed locked, so unadopted, until the heal)."""
    migrate(postgres_url)

    async def scenario() -> None:
        async with _silent_and_other(postgres_url) as (operation_id, connection, other):
            raw: Any = connection.connection.driver_connection
            with raw.pipeline():
                raw.cursor().execute(
                    "SELECT 1 FROM operations WHERE operation_id = %s FOR UPDATE",
                    (operation_id,),
                )
                raw.pgconn.flush()  # sent; the Sync never is while we sleep
                await asyncio.sleep(1.5)  # well past the 0.6 s idle timeout
                assert await other.claim(operation_id, "b", T0, 10) is None

    asyncio.run(scenario())


@pytest.mark.rule("O4")
@pytest.mark.postgres
def test_postgres_sessions_ask_the_server_to_probe_a_silent_client(postgres_url: str) -> None:
    """§5 O4: the journal's sessions set the server's TCP keepalive and user timeout (after
    twice the busy timeout, three probes a second apart), so a replica cut off in
    the middle of a pipeline loses its session, and its row locks, that long after
    it went silent, instead of when the operating system's defaults notice (hours)."""
    migrate(postgres_url)
    journal = open_journal(postgres_url, busy_timeout=2.0)
    try:
        with journal._engine.connect() as connection:
            shown = {
                name: connection.exec_driver_sql(f"SHOW {name}").scalar()
                for name in (
                    "tcp_keepalives_idle",
                    "tcp_keepalives_interval",
                    "tcp_keepalives_count",
                    "tcp_user_timeout",
                )
            }
    finally:
        asyncio.run(journal.close())
    assert shown == {
        "tcp_keepalives_idle": "4",  # seconds
        "tcp_keepalives_interval": "1",
        "tcp_keepalives_count": "3",
        "tcp_user_timeout": "7000",  # ms: the idle time and three probes
    }


@pytest.mark.postgres
def test_postgres_connections_ended_while_idle_are_replaced_without_an_error(
    postgres_url: str, postgres_cluster: Any
) -> None:
    """Storage: the journal keeps its connections; when the server ends them while
    they are idle (a restart, a terminated backend), the next reads and writes run
    on fresh connections and succeed: nothing had been sent on the dead ones."""
    migrate(postgres_url)
    database = sa.make_url(postgres_url).database

    async def scenario() -> None:
        journal = open_journal(postgres_url, busy_timeout=2)
        try:
            operation = new_operation(1)
            stored, _ = await journal.submit(operation, first_event(operation))
            # Several calls at once, so several worker threads hold a connection.
            before = (
                await asyncio.gather(*(_snapshot(journal, stored.operation_id) for _ in range(8)))
            )[0]
            postgres_cluster.admin(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE datname = '{database}' AND pid <> pg_backend_pid()"
            )
            for snapshot in await asyncio.gather(
                *(_snapshot(journal, stored.operation_id) for _ in range(8))
            ):
                assert snapshot == before
            assert (await journal.commit(dispatch(stored))).state == OpState.DISPATCHING
        finally:
            await journal.close()

    asyncio.run(scenario())
