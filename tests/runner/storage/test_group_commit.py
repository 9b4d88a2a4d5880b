"""Group commit in the runner store (issue 10): writes queued together land in one
transaction, and each keeps its own outcome.

Real SQLite files; the transactions are counted with sqlite3's own statement trace
on the store's connection (what SQLite was asked to run, not a stand-in).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from runner_svc.core.model import RowState
from runner_svc.core.transitions import ConfirmStart, IllegalRowEvent, LaunchIntent
from runner_svc.storage.async_store import AsyncRunnerStore
from runner_svc.storage.sqlite_store import SqliteRunnerStore, StoreFencedError, StoreWriteError
from tests.runner.storage.sql_reference import sql_changes, sql_get, sql_last_sequence
from tests.runner.storage.test_async_store_and_watch import A, admit
from tests.runner.storage.test_store_mirror import fail_commits_of_a_launch

B = "b" * 32


def traced(store: AsyncRunnerStore) -> list[str]:
    """Every statement the store's connection runs from now on."""
    statements: list[str] = []
    store.store._db.set_trace_callback(statements.append)
    return statements


def commits(statements: list[str]) -> int:
    return sum(1 for sql in statements if sql.strip().upper() == "COMMIT")


@pytest.mark.rule("R4")
def test_writes_queued_in_one_loop_turn_land_in_one_transaction(tmp_path: Path) -> None:
    """R4 (group commit): three admissions queued before the loop turns: one BEGIN ...
    COMMIT (one fsync),
    three rows at consecutive sequences, memory and SQL agreeing."""
    path = tmp_path / "r.db"

    async def main() -> None:
        store = AsyncRunnerStore(SqliteRunnerStore.open(path, A))
        try:
            statements = traced(store)
            queued = [store.queue_write(op, admit(op)) for op in ("op_1", "op_2", "op_3")]
            rows = await asyncio.gather(*(q.landed for q in queued))
            assert commits(statements) == 1
            assert [row.sequence for row in rows if row is not None] == [1, 2, 3]
            for row in rows:
                assert row is not None and row == sql_get(path, row.operation_id)
            assert await store.changes_after(0) == sql_changes(path, 0)
            statements.clear()
            await store.write("op_4", admit("op_4"))  # one alone: no savepoint
            assert commits(statements) == 1
            assert not any("SAVEPOINT" in sql for sql in statements)
        finally:
            await store.close()

    asyncio.run(main())


@pytest.mark.rule("R3")
def test_an_illegal_write_in_a_batch_fails_alone_and_leaves_no_gap(tmp_path: Path) -> None:
    """R3: a change the row does not allow raises for its own caller only; the writes
    around it land, at consecutive sequences, as if it had never been queued."""
    path = tmp_path / "r.db"

    async def main() -> None:
        store = AsyncRunnerStore(SqliteRunnerStore.open(path, A))
        try:
            await store.write("op_1", admit("op_1"))
            first = store.queue_write("op_1", LaunchIntent(A))
            illegal = store.queue_write("op_2", ConfirmStart(A, 2.0))  # no such row
            third = store.queue_write("op_3", admit("op_3"))
            with pytest.raises(IllegalRowEvent):
                await illegal.landed
            launched, admitted = await first.landed, await third.landed
            assert launched is not None and launched.state is RowState.LAUNCHING
            assert admitted is not None and (launched.sequence, admitted.sequence) == (2, 3)
            assert sql_get(path, "op_2") is None and sql_last_sequence(path) == 3
            assert await store.get("op_2") is None
            assert await store.changes_after(0) == sql_changes(path, 0)
        finally:
            await store.close()

    asyncio.run(main())


@pytest.mark.rule("R7")
def test_a_failed_commit_fails_every_write_of_the_batch(tmp_path: Path) -> None:
    """R7, fail closed: when the one COMMIT fails, no write of the batch is reported
    written, none is in the file, and reads come from SQL until a write finds it again."""
    path = tmp_path / "r.db"

    async def main() -> None:
        store = AsyncRunnerStore(SqliteRunnerStore.open(path, A))
        try:
            await store.write("op_1", admit("op_1"))
            fail_commits_of_a_launch(path)
            queued = [
                store.queue_write("op_1", LaunchIntent(A)),
                store.queue_write("op_2", admit("op_2")),
            ]
            for write in queued:
                with pytest.raises(StoreWriteError, match="commit failed"):
                    await write.landed
            assert sql_get(path, "op_2") is None and sql_last_sequence(path) == 1
            assert await store.get("op_1") == sql_get(path, "op_1")
            assert await store.changes_after(0) == sql_changes(path, 0)
        finally:
            await store.close()

    asyncio.run(main())


def test_a_fenced_batch_writes_nothing(tmp_path: Path) -> None:
    """§6: once another incarnation owns the store, every write of a batch is refused
    as fenced and nothing of it reaches the file."""
    path = tmp_path / "r.db"

    async def main() -> None:
        store = AsyncRunnerStore(SqliteRunnerStore.open(path, A))
        newer = SqliteRunnerStore.open(path, B, acquire_lock=False)
        try:
            queued = [store.queue_write(op, admit(op)) for op in ("op_1", "op_2")]
            for write in queued:
                with pytest.raises(StoreFencedError):
                    await write.landed
            assert sql_last_sequence(path) == 0
        finally:
            newer.close()
            await store.close()

    asyncio.run(main())


@pytest.mark.rule("R2", "R4")
def test_a_read_after_queued_writes_waits_for_them(tmp_path: Path) -> None:
    """R2, R4: a call that reaches SQL sends the writes queued before it first: the read that
    memory cannot answer (a write of the row is pending) sees them."""
    path = tmp_path / "r.db"

    async def main() -> None:
        store = AsyncRunnerStore(SqliteRunnerStore.open(path, A))
        try:
            queued = store.queue_write("op_1", admit("op_1"))
            row = await store.get("op_1")  # pending: asked of SQL, behind the write
            assert row is not None and row == await queued.landed
        finally:
            await store.close()

    asyncio.run(main())


def transactions(statements: list[str]) -> list[list[str]]:
    """The traced statements grouped by transaction (BEGIN ... COMMIT)."""
    groups: list[list[str]] = []
    for sql in statements:
        if sql.strip().upper().startswith("BEGIN"):
            groups.append([])
        elif groups:
            groups[-1].append(sql)
    return groups


@pytest.mark.rule("C10")
def test_a_release_carried_on_a_dispatch_lands_with_its_admission(tmp_path: Path) -> None:
    """C10, issue 10: the Release a Dispatch carries and that Dispatch's admission are
    written in one transaction (one fsync for the two)."""
    from runner_svc.service import DispatchCall
    from tests.runner.live import envelope, live_runner
    from turnwire.ids import sha256_hex, stamp_now

    async def main() -> None:
        async with live_runner(tmp_path / "r.db") as live:
            service = live.runner.service
            await live.dispatch("op_1")
            await live.wait_settled("op_1")
            statements = traced(service.store)
            body = envelope("op_2")
            call = DispatchCall(
                "op_2",
                body,
                sha256_hex(body),
                live.incarnation,
                1,
                1,
                stamp_now(),
                releases=(("op_1", live.incarnation, 1),),
            )
            await service.dispatch(call)
            released = await live.wait_state("op_1", lambda op: op.released)
            assert not released.HasField("result")
            admission = next(
                group
                for group in transactions(statements)
                if any(sql.startswith("INSERT INTO runner_operations") for sql in group)
            )
            assert any("op_2" in sql for sql in admission)
            assert any(
                sql.startswith("UPDATE runner_operations") and "'op_1'" in sql for sql in admission
            )

    asyncio.run(main())
