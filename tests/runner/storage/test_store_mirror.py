"""The store's in-memory mirror and raw-SQL hot path on real SQLite files (issue 10).

Every answer the store gives from memory must be what the file says (read
independently, tests/runner/storage/sql_reference.py): after writes, across
the edge of the window of recent changes, after a write that failed, after a
fence, and in the next incarnation. Rows must be stored exactly as the
SQLAlchemy-era store stored them.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runner_svc.core.model import (
    Execution,
    OperationRow,
    RowState,
    SlotKind,
    StopReason,
    TurnFailure,
    TurnOutput,
)
from runner_svc.core.transitions import (
    Admit,
    ConfirmStart,
    IllegalRowEvent,
    LaunchIntent,
    RecordStopReason,
    Release,
    Settle,
    Tombstone,
)
from runner_svc.core.witness import digest_of
from runner_svc.storage import executions_json
from runner_svc.storage.mirror import StoreMirror
from runner_svc.storage.sqlite_store import (
    SqliteRunnerStore,
    StoreFencedError,
    StoreWriteError,
    make_engine,
)
from runner_svc.storage.tables import operations, store_meta
from tests.runner.storage.sql_reference import sql_changes, sql_get, sql_last_sequence

A, B, C = "a" * 32, "b" * 32, "c" * 32
RESULT = TurnOutput(b"\x00out\xffput", "text/plain", {"z": "1", "a": "\u00e9"})


def admit(store: SqliteRunnerStore, op: str) -> OperationRow:
    change = Admit(op, store.incarnation_id, SlotKind.WRITABLE, "d" * 64, 1, 1, 1.0, 5)
    return store.write(op, change)


def run_turn(store: SqliteRunnerStore, op: str, *, fail: bool = False) -> None:
    """Admit, launch, start and settle ``op`` (every kind of column gets a value)."""
    inc = store.incarnation_id
    admit(store, op)
    store.write(op, LaunchIntent(inc))
    store.write(op, ConfirmStart(inc, 2))  # an int time: stored REAL, read back a float
    if fail:
        failure = TurnFailure("EXECUTOR_FAILED", "it broke")
        store.write(op, Settle(inc, RowState.FAILED, Execution.STARTED, 3.5, error=failure))
    else:
        store.write(op, Settle(inc, RowState.SUCCEEDED, Execution.STARTED, 3.5, result=RESULT))


def assert_memory_is_the_file(
    store: SqliteRunnerStore, ops: list[str], *, window_from: int = 0
) -> None:
    """``ops`` are served from memory, and so is every cursor from ``window_from`` on;
    each such answer is the file's."""
    for op in ops:
        in_memory = store.mirror.row(op)
        assert in_memory is not None, f"{op} not served from memory"
        assert in_memory == sql_get(store.path, op)
    last = sql_last_sequence(store.path)
    for after in range(window_from, last + 2):
        from_memory = store.mirror.changes_after(after, 500)
        assert from_memory is not None, f"changes after {after} not served from memory"
        assert from_memory == sql_changes(store.path, after)


def small_mirror(store: SqliteRunnerStore, **sizes: int) -> None:
    """The store as if opened with a smaller mirror (as a long-lived runner's fills up)."""
    store.mirror = StoreMirror(store.last_sequence(), **sizes)


def test_memory_reads_agree_with_sql_after_every_write(tmp_path: Path) -> None:
    """Issue 10: each write lands in memory exactly as SQL reads it back, floats, bytes,
    JSON metadata, NULLs and booleans included, and changes_after matches at every cursor."""
    store = SqliteRunnerStore.open(tmp_path / "r.db", A)
    try:
        run_turn(store, "op_ok")
        run_turn(store, "op_failed", fail=True)
        store.write("op_tomb", Tombstone("op_tomb", A, 3, 4.0))
        admit(store, "op_stopped")
        store.write("op_stopped", RecordStopReason(StopReason.CANCEL))
        store.write("op_ok", Release())
        ops = ["op_ok", "op_failed", "op_tomb", "op_stopped"]
        assert_memory_is_the_file(store, ops)
        assert store.get_many([*ops, "op_absent"]) == {op: sql_get(store.path, op) for op in ops}
        assert store.get("op_absent") is None
    finally:
        store.close()


def test_changes_after_across_the_window_edge_is_what_sql_returns(tmp_path: Path) -> None:
    """Issue 10: a cursor inside the window of recent changes is answered from memory, an
    older one from SQL, and both are exactly SQL's answer, for every cursor and limit."""
    store = SqliteRunnerStore.open(tmp_path / "r.db", A)
    small_mirror(store, changes_kept=4, rows_kept=3)
    try:
        for n in range(8):
            admit(store, f"op_{n}")
        for n in (1, 6, 3):  # rows move to their latest change; older entries go
            store.write(f"op_{n}", RecordStopReason(StopReason.CANCEL))
        last = sql_last_sequence(store.path)
        in_window = [s for s in range(-1, last + 2) if store.mirror.changes_after(s, 1) is not None]
        assert in_window and min(in_window) > 0  # the oldest cursors are past the window
        assert in_window == list(range(min(in_window), last + 2))
        for after in range(-1, last + 2):
            for limit in (1, 2, 3, 500):
                assert store.changes_after(after, limit) == sql_changes(store.path, after, limit)
    finally:
        store.close()


def test_the_row_cache_is_bounded_and_a_miss_reads_sql(tmp_path: Path) -> None:
    """Issue 10: memory keeps at most the rows it may; a row pushed out is read from SQL."""
    store = SqliteRunnerStore.open(tmp_path / "r.db", A)
    small_mirror(store, rows_kept=2, changes_kept=2)
    try:
        for n in range(5):
            admit(store, f"op_{n}")
        assert [store.mirror.row(f"op_{n}") is not None for n in range(5)] == [
            False,
            False,
            False,
            True,
            True,
        ]
        assert store.get("op_0") == sql_get(store.path, "op_0")
        assert store.mirror.row("op_0") == sql_get(store.path, "op_0")  # kept once read
    finally:
        store.close()


def test_results_count_against_the_memory_budget(tmp_path: Path) -> None:
    """Issue 10: memory is bounded in bytes as well: a large result is not kept."""
    store = SqliteRunnerStore.open(tmp_path / "r.db", A)
    small_mirror(store, bytes_kept=64 * 1024)
    try:
        admit(store, "op_big")
        store.write("op_big", LaunchIntent(A))
        big = TurnOutput(b"x" * (128 * 1024))
        store.write("op_big", Settle(A, RowState.SUCCEEDED, Execution.STARTED, 3.0, result=big))
        assert store.mirror.row("op_big") is None
        assert store.mirror.changes_after(0, 500) is None  # the window moved past it too
        assert store.get("op_big") == sql_get(store.path, "op_big")
        assert store.changes_after(0) == sql_changes(store.path, 0)
    finally:
        store.close()


@pytest.mark.rule("R3")
def test_a_refused_write_leaves_memory_unchanged(tmp_path: Path) -> None:
    """R3, issue 10: an illegal change, a floor refusal or an SQLite error inside the
    transaction rolls back, raises, and memory still says what the file says."""
    path = tmp_path / "r.db"
    store = SqliteRunnerStore.open(path, A)
    try:
        admit(store, "op")
        before = store.get("op")
        with pytest.raises(IllegalRowEvent):
            store.write("op", ConfirmStart(A, 2.0))
        with sqlite3.connect(path) as raw:
            raw.execute(
                "CREATE TRIGGER refuse_launch BEFORE UPDATE ON runner_operations "
                "WHEN NEW.state = 'LAUNCHING' BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
        with pytest.raises(StoreWriteError, match="refused"):
            store.write("op", LaunchIntent(A))
        assert store.mirror.row("op") == before == sql_get(path, "op")
        assert_memory_is_the_file(store, ["op"])
        with sqlite3.connect(path) as raw:
            raw.execute("DROP TRIGGER refuse_launch")
        assert before is not None
        assert store.write("op", LaunchIntent(A)).sequence == before.sequence + 1
        assert_memory_is_the_file(store, ["op"])
    finally:
        store.close()


def fail_commits_of_a_launch(path: Path) -> None:
    """From now on a COMMIT of a transaction that moved a row to LAUNCHING fails (a
    deferred foreign key the trigger breaks), after every statement in it succeeded."""
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE t_parent (id INTEGER PRIMARY KEY)")
        raw.execute(
            "CREATE TABLE t_child (parent INTEGER REFERENCES t_parent (id) "
            "DEFERRABLE INITIALLY DEFERRED)"
        )
        raw.execute(
            "CREATE TRIGGER orphan AFTER UPDATE ON runner_operations "
            "WHEN NEW.state = 'LAUNCHING' BEGIN INSERT INTO t_child VALUES (42); END"
        )


def test_a_failed_commit_sends_reads_to_sql_until_the_next_write(tmp_path: Path) -> None:
    """Issue 10: a COMMIT that fails (here a deferred foreign key) rolls back; memory stops
    answering until a write finds the store's sequence again; then all agrees with SQL."""
    path = tmp_path / "r.db"
    store = SqliteRunnerStore.open(path, A)
    try:
        admit(store, "op")
        admit(store, "op_other")
        fail_commits_of_a_launch(path)
        with pytest.raises(StoreWriteError, match="commit failed"):
            store.write("op", LaunchIntent(A))
        assert store.mirror.row("op") is None and store.mirror.changes_after(0, 500) is None
        assert store.get("op") == sql_get(path, "op")
        assert store.get("op").state is RowState.ACCEPTED  # type: ignore[union-attr]
        with sqlite3.connect(path) as raw:
            raw.execute("DROP TRIGGER orphan")
        relaunched = store.write("op", LaunchIntent(A))
        assert relaunched.sequence == sql_last_sequence(path) == 3
        for after in range(-1, 5):
            assert store.changes_after(after) == sql_changes(path, after)
        assert_memory_is_the_file(store, ["op"], window_from=2)  # only its own writes
    finally:
        store.close()


def test_a_fenced_write_changes_nothing_and_memory_is_dropped(tmp_path: Path) -> None:
    """§6, issue 10: once another incarnation took the store (acquire_lock=False stands
    for a failed lock), this one's write is fenced, its row is not in memory or SQL,
    and its reads come from SQL: they see what the new owner writes."""
    path = tmp_path / "r.db"
    old = SqliteRunnerStore.open(path, A)
    admit(old, "op")
    before = old.get("op")
    new = SqliteRunnerStore.open(path, B, acquire_lock=False)
    try:
        with pytest.raises(StoreFencedError):
            old.write("op", LaunchIntent(A))
        assert old.get("op") == before == sql_get(path, "op")
        new.write("op", RecordStopReason(StopReason.CANCEL))
        assert old.get("op") == sql_get(path, "op") == new.get("op")
        assert old.changes_after(0) == sql_changes(path, 0) == new.changes_after(0)
    finally:
        new.close()
        old.close()


def test_a_reopened_store_sees_what_the_previous_incarnation_wrote(tmp_path: Path) -> None:
    """§6, issue 10: a new incarnation's memory starts empty at the store's last change:
    earlier rows come from SQL, at every cursor, and its own writes follow them."""
    path = tmp_path / "r.db"
    first = SqliteRunnerStore.open(path, A)
    run_turn(first, "op_1")
    admit(first, "op_2")
    first.close()
    second = SqliteRunnerStore.open(path, B)
    try:
        last = sql_last_sequence(path)
        for after in range(-1, last + 1):
            assert second.changes_after(after) == sql_changes(path, after)
        assert second.get_many(["op_1", "op_2"]) == {
            op: sql_get(path, op) for op in ("op_1", "op_2")
        }
        assert second.get("op_2").incarnation_id == A  # type: ignore[union-attr]
        admit(second, "op_3")
        for after in range(-1, last + 2):
            assert second.changes_after(after) == sql_changes(path, after)
        assert second.changes_after(last)[0].sequence == last + 1
    finally:
        second.close()


# --- the encoding is the one SQLAlchemy wrote --------------------------------------


def _old_values(row: OperationRow) -> dict[str, Any]:
    """Frozen copy of the SQLAlchemy-era store's ``_to_values``."""
    result, error = row.result, row.error
    return {
        "operation_id": row.operation_id,
        "state": row.state.value,
        "execution": row.execution.value,
        "incarnation_id": row.incarnation_id,
        "fencing_token": row.fencing_token,
        "attempt": row.attempt,
        "kind": row.kind.value if row.kind else None,
        "envelope_digest": row.envelope_digest,
        "stop_reason": row.stop_reason.value if row.stop_reason else None,
        "result_output": result.output if result else None,
        "result_content_type": result.content_type if result else None,
        "result_metadata": json.dumps(dict(result.metadata), sort_keys=True) if result else None,
        "error_reason": error.reason if error else None,
        "error_message": error.message if error else None,
        "released": row.released,
        "accepted_at": row.accepted_at,
        "started_at": row.started_at,
        "settled_at": row.settled_at,
        "dispatch_stamp": row.dispatch_stamp,
        # r0007 (R15): the execution records, in their one JSON encoding.
        "executions": executions_json.dumps(row.executions),
    }


def _stored(path: Path) -> list[tuple[Any, ...]]:
    """Every cell of every row as SQLite holds it: its type and its exact literal
    (a BLOB as hex, a REAL as its shortest exact decimal, TEXT byte for byte)."""
    # released_at is retention's bookkeeping (set by a trigger, §9 K2), not the row's encoding.
    columns = [c.name for c in operations.columns if c.name != "released_at"]
    cells = ", ".join(f"typeof({c}), quote({c})" for c in columns)
    with sqlite3.connect(path) as raw:
        return raw.execute(f"SELECT {cells} FROM runner_operations ORDER BY sequence").fetchall()


def test_rows_are_stored_byte_for_byte_as_sqlalchemy_stored_them(tmp_path: Path) -> None:
    """Issue 10: the raw-SQL write path stores each column with the type and bytes the
    SQLAlchemy Core path did, so files written before and after read the same."""
    new_path = tmp_path / "new.db"
    store = SqliteRunnerStore.open(new_path, A)
    try:
        run_turn(store, "op_ok")
        run_turn(store, "op_failed", fail=True)
        run_turn(store, "op_released")
        store.write("op_released", Release())  # R9: its result goes
        store.write("op_tomb", Tombstone("op_tomb", A, 3, 4))
        rows = sorted(store.changes_after(0), key=lambda row: row.sequence)
    finally:
        store.close()
    old_path = tmp_path / "old.db"
    SqliteRunnerStore.open(old_path, A).close()  # same schema, no rows
    engine = make_engine(old_path)
    try:
        with engine.begin() as conn:  # what the SQLAlchemy-era write did, row by row
            for row in rows:
                values = {**_old_values(row), "sequence": row.sequence}
                conn.execute(operations.insert().values(**values))
            count, digest = digest_of(row.operation_id for row in rows)
            last = rows[-1].sequence
            conn.execute(
                store_meta.update().values(last_sequence=last, row_count=count, row_digest=digest)
            )
    finally:
        engine.dispose()
    assert _stored(new_path) == _stored(old_path)
    reopened = SqliteRunnerStore.open(old_path, B)  # and the new code reads the old file
    try:
        assert reopened.changes_after(0) == rows
        assert reopened.get_many([row.operation_id for row in rows]) == {
            row.operation_id: row for row in rows
        }
    finally:
        reopened.close()


def test_rows_past_the_store_counter_are_never_hidden_by_memory(tmp_path: Path) -> None:
    """Issue 10: a file whose rows run past its change counter (edited by hand) is
    answered from SQL for those rows: memory never claims changes it has not seen."""
    path = tmp_path / "r.db"
    store = SqliteRunnerStore.open(path, A)
    admit(store, "op_1")
    admit(store, "op_2")
    store.close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE runner_store_meta SET last_sequence = 0")
    reopened = SqliteRunnerStore.open(path, B)
    try:
        for after in range(-1, 4):
            assert reopened.changes_after(after) == sql_changes(path, after)
        assert [row.operation_id for row in reopened.changes_after(0)] == ["op_1", "op_2"]
    finally:
        reopened.close()
