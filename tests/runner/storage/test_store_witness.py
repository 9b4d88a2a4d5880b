"""The store's half of the §6 witness (issue 8.1) on real SQLite files: the
admission floor, the chain of openings, the seal, the row digest, and the
database guards that keep a hand-run statement from voiding them."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from runner_svc.core.model import RunnerRefusal, SlotKind, StopReason
from runner_svc.core.transitions import Admit, LaunchIntent, RecordStopReason
from runner_svc.core.witness import SEALED_FLOOR, vouches
from runner_svc.storage.sqlite_store import SqliteRunnerStore, StoreWriteError

A, B, C = "a" * 32, "b" * 32, "c" * 32


def admit(store: SqliteRunnerStore, op: str, stamp: int) -> None:
    store.write(op, Admit(op, store.incarnation_id, SlotKind.WRITABLE, "d" * 64, 1, 1, 1.0, stamp))


@pytest.mark.rule("W2", "C6")
def test_a_dispatch_below_the_floor_is_refused_typed_and_writes_nothing(tmp_path: Path) -> None:
    """§6.1 W2, C6: below the floor: DISPATCH_STALE (definite), nothing written."""
    store = SqliteRunnerStore.open(tmp_path / "r.db", A)
    try:
        assert store.advance_floor(1_000) == 1_000
        with pytest.raises(RunnerRefusal) as refused:
            admit(store, "op_old", 999)
        assert refused.value.refusal.value == "DISPATCH_STALE"
        assert store.get("op_old") is None
        admit(store, "op_ok", 1_000)
    finally:
        store.close()


@pytest.mark.rule("W2")
def test_the_floor_never_passes_a_row_that_may_still_launch(tmp_path: Path) -> None:
    """§6.1 W2: the floor is held at an accepted row's stamp until it launches; never down."""
    store = SqliteRunnerStore.open(tmp_path / "r.db", A)
    try:
        admit(store, "op_waiting", 500)
        assert store.advance_floor(2_000) == 500  # held at the launchable row's stamp
        store.write("op_waiting", LaunchIntent(A))
        assert store.advance_floor(2_000) == 2_000
        assert store.advance_floor(1_000) == 2_000  # never down
    finally:
        store.close()


@pytest.mark.rule("W2", "W3", "R8")
def test_a_row_stopped_before_launch_does_not_hold_the_floor_and_seal_works(
    tmp_path: Path,
) -> None:
    """§6.1 W2/W3, R8: a row stopped by shutdown never launches, so the store seals and the
    next opening vouches for it."""
    store = SqliteRunnerStore.open(tmp_path / "r.db", A)
    admit(store, "op_stopped", 500)
    store.write("op_stopped", RecordStopReason(StopReason.SHUTDOWN))
    assert store.seal()
    store.close()
    again = SqliteRunnerStore.open(tmp_path / "r.db", B)
    try:
        opening = again.openings[0]
        assert (opening.incarnation_id, opening.predecessor_incarnation_id) == (B, A)
        assert opening.predecessor_floor == SEALED_FLOOR
        assert vouches(again.openings, A, 500)
    finally:
        again.close()


@pytest.mark.rule("W2", "R3")
def test_a_launch_below_the_floor_is_refused(tmp_path: Path) -> None:
    """§6.1 W2, R3 (defence in depth): even if the floor got past an unlaunched row, no launch."""
    path = tmp_path / "r.db"
    store = SqliteRunnerStore.open(path, A)
    try:
        admit(store, "op_late", 500)
        with sqlite3.connect(path) as raw:
            raw.execute("UPDATE runner_store_meta SET admission_floor = 9000")
        with pytest.raises(StoreWriteError):
            store.write("op_late", LaunchIntent(A))
    finally:
        store.close()


def test_a_restored_copy_in_place_keeps_its_id_but_cannot_vouch(tmp_path: Path) -> None:
    """Regression 8.1: a backup copied over the store (same inode) kept everything the
    store used to recognise itself; its chain now shows the floor the backup had."""
    path = tmp_path / "r.db"
    store = SqliteRunnerStore.open(path, A)
    store.advance_floor(1_000)
    backup = tmp_path / "backup.db"
    source, target = sqlite3.connect(path), sqlite3.connect(backup)
    source.backup(target)
    source.close()
    target.close()
    admit(store, "op_ran", 5_000)
    store.write("op_ran", LaunchIntent(A))
    store.advance_floor(9_000)
    store.close()
    inode = path.stat().st_ino
    for sidecar in ("-wal", "-shm"):
        path.with_name(path.name + sidecar).unlink(missing_ok=True)
    shutil.copyfile(backup, path)
    assert path.stat().st_ino == inode
    restored = SqliteRunnerStore.open(path, B)
    try:
        assert restored.store_id == store.store_id  # nothing in the file can tell
        assert restored.get("op_ran") is None
        assert restored.openings[0].predecessor_floor == 1_000
        assert not vouches(restored.openings, A, 5_000)
    finally:
        restored.close()


@pytest.mark.rule("W3")
def test_the_chain_keeps_every_opening_newest_first(tmp_path: Path) -> None:
    """§6.1 W3: every opening is recorded with its predecessor, newest first."""
    path = tmp_path / "r.db"
    for incarnation in (A, B, C):
        SqliteRunnerStore.open(path, incarnation).close()
    store = SqliteRunnerStore.open(path, "d" * 32)
    try:
        chain = [(o.incarnation_id, o.predecessor_incarnation_id) for o in store.openings]
        assert chain == [("d" * 32, C), (C, B), (B, A), (A, "")]
    finally:
        store.close()


def test_a_row_removed_by_hand_voids_the_store_id(tmp_path: Path) -> None:
    """§6: an edit that deletes a row (triggers dropped first) is caught by the row digest:
    a new store_id, so nothing in it passes for the old store's proofs."""
    path = tmp_path / "r.db"
    store = SqliteRunnerStore.open(path, A)
    admit(store, "op_1", 10)
    admit(store, "op_2", 10)
    original = store.store_id
    store.close()
    with sqlite3.connect(path) as raw:
        raw.execute("DROP TRIGGER runner_operations_deleted_only_when_pruned")
        raw.execute("DELETE FROM runner_operations WHERE operation_id = 'op_2'")
    edited = SqliteRunnerStore.open(path, B)
    try:
        assert edited.store_id != original
    finally:
        edited.close()
    untouched = SqliteRunnerStore.open(path, C)
    try:  # the new id sticks: the digest now matches the rows it has
        assert untouched.store_id == edited.store_id
    finally:
        untouched.close()


@pytest.mark.rule("W2", "W3", "R9")
@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM runner_operations",
        "UPDATE runner_store_openings SET predecessor_floor = 0",
        "DELETE FROM runner_store_openings",
        "UPDATE runner_store_meta SET admission_floor = 0",
    ],
)
def test_the_database_refuses_what_would_void_the_witness(tmp_path: Path, statement: str) -> None:
    """§6.1 W2/W3, R9: rows are never deleted, openings are append-only, the floor never
    goes down within an owner, whoever writes."""
    path = tmp_path / "r.db"
    store = SqliteRunnerStore.open(path, A)
    admit(store, "op_1", 10)
    store.write("op_1", LaunchIntent(A))
    store.advance_floor(100)
    store.close()
    with sqlite3.connect(path) as raw, pytest.raises(sqlite3.IntegrityError):
        raw.execute(statement)
