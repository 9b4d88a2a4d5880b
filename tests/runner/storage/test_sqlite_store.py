"""The runner store on real SQLite files: lock, fencing, schema guard, identity (§6, R3)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from runner_svc.core.model import Execution, RowState, SlotKind, StopReason, TurnOutput
from runner_svc.core.settlement import reported_row
from runner_svc.core.transitions import (
    Admit,
    ConfirmStart,
    IllegalRowEvent,
    LaunchIntent,
    RecordStopReason,
    Settle,
    Tombstone,
)
from runner_svc.storage.migrate import VERSION_TABLE
from runner_svc.storage.sqlite_store import (
    SqliteRunnerStore,
    StoreFencedError,
    StoreLockedError,
    StoreSchemaError,
)

A, B = "a" * 32, "b" * 32
REPO = Path(__file__).resolve().parents[3]


def admit(store: SqliteRunnerStore, op: str, incarnation: str = A) -> None:
    store.write(op, Admit(op, incarnation, SlotKind.WRITABLE, "d" * 64, 1, 1, 1.0))


def test_second_process_on_the_same_store_is_refused(tmp_path: Path) -> None:
    """§6: one live process per store; a second opener fails with a clear error."""
    path = tmp_path / "runner.db"
    store = SqliteRunnerStore.open(path, A)
    try:
        code = (
            "import sys\n"
            "from runner_svc.storage.sqlite_store import SqliteRunnerStore, StoreLockedError\n"
            f"try:\n    SqliteRunnerStore.open(sys.argv[1], {B!r})\n"
            "except StoreLockedError as e:\n    print(e); sys.exit(3)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, str(path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            check=False,
        )
        assert done.returncode == 3, done.stderr
        assert "in use by another runner process" in done.stdout
        assert str(os.getpid()) in done.stdout
    finally:
        store.close()


def test_lock_is_released_on_close(tmp_path: Path) -> None:
    """§6: closing the store frees the lock so the next process may start."""
    path = tmp_path / "runner.db"
    SqliteRunnerStore.open(path, A).close()
    SqliteRunnerStore.open(path, B).close()


def test_second_open_in_the_same_process_is_refused(tmp_path: Path) -> None:
    """§6: the lock is per open, not per process: a second open is refused too."""
    path = tmp_path / "runner.db"
    store = SqliteRunnerStore.open(path, A)
    try:
        with pytest.raises(StoreLockedError):
            SqliteRunnerStore.open(path, B)
    finally:
        store.close()


@pytest.mark.parametrize(
    "change",
    [
        Admit("op2", A, SlotKind.WRITABLE, "d", 1, 1, 1.0),
        Tombstone("op2", A, 1, 1.0),
        LaunchIntent(A),
        Settle(A, RowState.CANCELLED, Execution.NOT_STARTED, 2.0),
    ],
    ids=["admit", "tombstone", "launch_intent", "settle"],
)
def test_older_incarnation_is_fenced_out(tmp_path: Path, change: object) -> None:
    """§6: once a newer incarnation opened the store, every write of the old one fails."""
    path = tmp_path / "runner.db"
    old = SqliteRunnerStore.open(path, A)
    admit(old, "op1")
    # The lock alone would stop this open; skip it to test the second defence.
    new = SqliteRunnerStore.open(path, B, acquire_lock=False)
    try:
        target = "op1" if not isinstance(change, Admit | Tombstone) else "op2"
        with pytest.raises(StoreFencedError):
            old.write(target, change)  # type: ignore[arg-type]
        assert old.get("op1").state is RowState.ACCEPTED  # type: ignore[union-attr]
        assert old.get("op2") is None
    finally:
        new.close()
        old.close()


def test_one_row_per_operation_across_incarnations(tmp_path: Path) -> None:
    """§6: an id admitted by an earlier incarnation cannot be admitted again."""
    path = tmp_path / "runner.db"
    store = SqliteRunnerStore.open(path, A)
    admit(store, "op")
    store.close()
    store = SqliteRunnerStore.open(path, B)
    try:
        with pytest.raises(IllegalRowEvent):
            admit(store, "op", B)
        connection = sqlite3.connect(path)
        with pytest.raises(sqlite3.IntegrityError):
            connection.execute(
                "INSERT INTO runner_operations "
                "SELECT * FROM runner_operations WHERE operation_id='op'"
            )
        connection.close()
    finally:
        store.close()


@pytest.mark.rule("R3")
def test_illegal_change_writes_nothing(tmp_path: Path) -> None:
    """R3: an illegal change raises, and neither the row nor the sequence moves."""
    store = SqliteRunnerStore.open(tmp_path / "runner.db", A)
    try:
        admit(store, "op")
        before, sequence = store.get("op"), store.last_sequence()
        with pytest.raises(IllegalRowEvent):
            store.write("op", ConfirmStart(A, 2.0))
        assert store.get("op") == before and store.last_sequence() == sequence
    finally:
        store.close()


def test_schema_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    """A store whose schema revision is unknown (newer code) is refused at open."""
    path = tmp_path / "runner.db"
    SqliteRunnerStore.open(path, A).close()
    connection = sqlite3.connect(path)
    connection.execute(f"UPDATE {VERSION_TABLE} SET version_num = 'r9999_from_the_future'")
    connection.commit()
    connection.close()
    with pytest.raises(StoreSchemaError, match="r9999_from_the_future"):
        SqliteRunnerStore.open(path, B)
    SqliteRunnerStore.open(tmp_path / "other.db", B).close()  # the lock was given back


def test_store_id_is_stable_and_a_copy_gets_a_new_one(tmp_path: Path) -> None:
    """§6: store_id survives restarts; a copied file never passes for the original."""
    path = tmp_path / "runner.db"
    first = SqliteRunnerStore.open(path, A)
    store_id = first.store_id
    first.close()
    again = SqliteRunnerStore.open(path, B)
    assert again.store_id == store_id
    again.close()
    copy = tmp_path / "copy.db"
    shutil.copy(path, copy)
    copied = SqliteRunnerStore.open(copy, "c" * 32)
    try:
        assert copied.store_id != store_id
    finally:
        copied.close()


@pytest.mark.rule("R3")
def test_restart_reports_what_the_earlier_incarnation_left(tmp_path: Path) -> None:
    """R3/§6: RUNNING -> INTERRUPTED STARTED, LAUNCHING -> INTERRUPTED UNKNOWN, ACCEPTED kept."""
    path = tmp_path / "runner.db"
    old = SqliteRunnerStore.open(path, A)
    for op in ("accepted", "launching", "running", "done"):
        admit(old, op)
    for op in ("launching", "running", "done"):
        old.write(op, LaunchIntent(A))
    for op in ("running", "done"):
        old.write(op, ConfirmStart(A, 2.0))
    old.write(
        "done", Settle(A, RowState.SUCCEEDED, Execution.STARTED, 3.0, result=TurnOutput(b"r"))
    )
    old.close()
    new = SqliteRunnerStore.open(path, B)
    try:
        seen = {
            op: reported_row(row, B)
            for op, row in new.get_many(["accepted", "launching", "running", "done"]).items()
        }
    finally:
        new.close()
    assert (seen["running"].state, seen["running"].execution) == (
        RowState.INTERRUPTED,
        Execution.STARTED,
    )
    assert (seen["launching"].state, seen["launching"].execution) == (
        RowState.INTERRUPTED,
        Execution.UNKNOWN,
    )
    assert (seen["accepted"].state, seen["accepted"].execution) == (
        RowState.ACCEPTED,
        Execution.NOT_STARTED,
    )
    assert seen["done"].result == TurnOutput(b"r")
    assert all(row.incarnation_id == A for row in seen.values())


def test_sequence_orders_changes_for_watch(tmp_path: Path) -> None:
    """Watch cursor: every durable change gets the next sequence; reads resume after it."""
    store = SqliteRunnerStore.open(tmp_path / "runner.db", A)
    try:
        admit(store, "op1")
        admit(store, "op2")
        store.write("op1", RecordStopReason(StopReason.CANCEL))
        assert [r.operation_id for r in store.changes_after(0)] == ["op2", "op1"]
        assert [r.operation_id for r in store.changes_after(2)] == ["op1"]
        assert store.last_sequence() == 3
    finally:
        store.close()


@pytest.mark.rule("R3")
def test_pragmas_make_the_store_durable(tmp_path: Path) -> None:
    """R3: WAL journal and synchronous=FULL are in force on the store's connections."""
    store = SqliteRunnerStore.open(tmp_path / "runner.db", A)
    try:
        with store._engine.connect() as connection:  # the adapter's own connection
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        store.close()
