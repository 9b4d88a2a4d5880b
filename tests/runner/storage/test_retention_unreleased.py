"""Runner retention of what no Release retires (PROTOCOL.md §9 K6), on real SQLite files.

A settled row the coordinator never released (it gave the turn up, or released
an incarnation that had ended) and a row an earlier incarnation left unsettled
used to stay for ever, and so did every executor record. Now such a row goes
once unchanged for --retain-unreleased, its key kept for ever: the id is
refused OPERATION_PRUNED from then on (never "absent", never run again), and
no admission floor ever lets that key go. The store's owner's own live rows
stay, however old; so does a row settled or released within the horizon.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runner_svc.core.model import RowState, RunnerRefusal, SlotKind
from runner_svc.core.retention import KEPT_FOR_EVER
from runner_svc.core.transitions import Admit, LaunchIntent
from runner_svc.storage.retention import drop_keys, prune_abandoned, prune_executor_records
from runner_svc.storage.sqlite_store import SqliteRunnerStore
from tests.runner.storage.test_retention_store import (
    NOW,
    WINDOW_US,
    admit,
    ids,
    raw,
    release,
    settle,
)

A, B, C = "a" * 32, "b" * 32, "c" * 32
DAY = 86400.0
RETAIN = 30 * DAY
LONG_AGO = NOW - 31 * DAY


def _abandon(store: SqliteRunnerStore) -> list[str]:
    return store.maintain(
        lambda db: (
            gone := prune_abandoned(db, now=NOW, retain=RETAIN, limit=500),
            gone,
        )
    )


def _set(path: Path, column: str, value: float, op: str) -> None:
    raw(path, f"UPDATE runner_operations SET {column} = ? WHERE operation_id = ?", value, op)


def _earlier_incarnation_left(path: Path) -> None:
    """Incarnation A: rows of every kind K6 weighs, then A ends (B opens the store)."""
    store = SqliteRunnerStore.open(path, A)
    try:
        settle(store, "op_given_up")  # settled, never released: the coordinator gave up
        _set(path, "settled_at", LONG_AGO, "op_given_up")
        settle(store, "op_settled_lately")  # within the horizon: may still be waited for
        _set(path, "settled_at", NOW - DAY, "op_settled_lately")
        admit(store, "op_left_launching")  # A died with it LAUNCHING (R3: UNKNOWN)
        store.write("op_left_launching", LaunchIntent(A))
        _set(path, "accepted_at", LONG_AGO, "op_left_launching")
        admit(store, "op_left_accepted")
        _set(path, "accepted_at", NOW - DAY, "op_left_accepted")  # within the horizon
        release(store, "op_released", NOW - DAY)  # K2's, not K6's
    finally:
        store.close()


@pytest.mark.rule("K6", "K2")
def test_rows_nobody_will_release_go_after_the_horizon_and_their_keys_stay_for_ever(
    tmp_path: Path,
) -> None:
    """§9 K6: gone: the long-settled unreleased row and the row a dead incarnation left
    LAUNCHING, each keeping its key with the for-ever bound; kept: what changed within
    the horizon, the released row (K2's horizon), and the owner's own live row however
    old. A Dispatch for a gone id is refused OPERATION_PRUNED; no floor drops its key;
    the store keeps its identity (count and digest follow)."""
    path = tmp_path / "r.db"
    _earlier_incarnation_left(path)
    store = SqliteRunnerStore.open(path, B)
    try:
        store_id = store.store_id
        admit(store, "op_mine")  # B's own live row, accepted long ago: B is running it
        _set(path, "accepted_at", LONG_AGO, "op_mine")
        assert sorted(_abandon(store)) == ["op_given_up", "op_left_launching"]
        assert ids(path) == {"op_settled_lately", "op_left_accepted", "op_released", "op_mine"}
        keys = raw(path, "SELECT operation_id, stamp_bound FROM runner_pruned_operations")
        assert sorted(keys) == [
            ("op_given_up", KEPT_FOR_EVER),
            ("op_left_launching", KEPT_FOR_EVER),
        ]
        with pytest.raises(RunnerRefusal) as refused:
            store.write(
                "op_given_up",
                Admit("op_given_up", B, SlotKind.WRITABLE, "d" * 64, 2, 1, NOW, 10**18),
            )
        assert refused.value.refusal.value == "OPERATION_PRUNED"
        # The highest floor there is (a sealed store's), any time later: the keys stay.
        raw(path, "UPDATE runner_store_meta SET admission_floor = ?", KEPT_FOR_EVER)
        later = NOW + 10_000 * DAY
        dropped = store.maintain(
            lambda db: (drop_keys(db, now=later, retain=0, window_us=WINDOW_US, limit=500), [])
        )
        assert dropped == (0, 0)  # none dropped, none reported waiting for the floor
        assert len(raw(path, "SELECT operation_id FROM runner_pruned_operations")) == 2
    finally:
        store.close()
    reopened = SqliteRunnerStore.open(path, C)
    try:
        assert reopened.store_id == store_id
        assert reopened.get("op_settled_lately") is not None
    finally:
        reopened.close()


@pytest.mark.rule("K6", "K4")
def test_the_database_lets_an_unreleased_row_go_only_with_its_key_kept_for_ever(
    tmp_path: Path,
) -> None:
    """§9 K6 in the database (migration r0005): an unreleased row whose key is kept with an
    ordinary stamp bound (one K4 would drop) may not be deleted; with the for-ever bound it
    may."""
    path = tmp_path / "r.db"
    _earlier_incarnation_left(path)
    raw(path, "INSERT INTO runner_pruned_operations VALUES ('op_given_up', 5, 1.0)")
    with pytest.raises(sqlite3.IntegrityError, match="kept for ever"):
        raw(path, "DELETE FROM runner_operations WHERE operation_id = 'op_given_up'")
    raw(
        path,
        "UPDATE runner_pruned_operations SET stamp_bound = ? WHERE operation_id = 'op_given_up'",
        KEPT_FOR_EVER,
    )
    raw(path, "DELETE FROM runner_operations WHERE operation_id = 'op_given_up'")
    assert "op_given_up" not in ids(path)


@pytest.mark.rule("K7")
@pytest.mark.rule("R10")
def test_executor_records_go_once_their_group_is_known_over(tmp_path: Path) -> None:
    """R10's records are pruned too: one the sweep ended, and one whose turn settled (its
    group was killed and reaped before it settled) go past the horizon; one whose turn
    still runs stays, however old, and so does one launched within the horizon."""
    path = tmp_path / "r.db"
    store = SqliteRunnerStore.open(path, A)
    try:
        records = store.executor_records()
        settle(store, "op_settled")
        admit(store, "op_running")
        store.write("op_running", LaunchIntent(A))
        settle(store, "op_recent")
        records.record("op_settled", 101, 1, "boot", LONG_AGO)
        records.record("op_running", 102, 1, "boot", LONG_AGO)
        records.record("op_swept", 103, 1, "boot", LONG_AGO)
        records.record("op_recent", 104, 1, "boot", NOW - DAY)
        (swept,) = raw(path, "SELECT id FROM runner_executor_processes WHERE pgid = 103")
        records.mark_ended(int(str(swept[0])), "killed by the sweep", LONG_AGO)
        gone = store.maintain(
            lambda db: (prune_executor_records(db, now=NOW, retain=7 * DAY, limit=500), [])
        )
        assert gone == 2
        left = raw(path, "SELECT operation_id FROM runner_executor_processes ORDER BY id")
        assert left == [("op_running",), ("op_recent",)]
        assert store.get("op_running") is not None
        assert store.get("op_running").state is RowState.LAUNCHING  # type: ignore[union-attr]
    finally:
        store.close()
