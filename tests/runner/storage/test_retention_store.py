"""Runner retention (issue 12, PROTOCOL.md §9 K2-K4) on real SQLite files.

Rows go only once settled and released (or tombstoned) and past the horizon;
their keys stay, so the id is refused OPERATION_PRUNED and never admitted
again; a key goes only past its own horizon and below the admission floor,
and then every later owner starts its floor above it. The store's row count
and digest follow every deletion (§6). Failures are real database failures.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from pathlib import Path

import pytest

from runner_svc.core.model import (
    Execution,
    RowState,
    RunnerRefusal,
    SlotKind,
    TurnOutput,
)
from runner_svc.core.retention import stamp_bound
from runner_svc.core.transitions import (
    Admit,
    ConfirmStart,
    LaunchIntent,
    Release,
    Settle,
    Tombstone,
)
from runner_svc.core.witness import digest_of
from runner_svc.storage import migrate
from runner_svc.storage.async_store import AsyncRunnerStore
from runner_svc.storage.retention import (
    RunnerPruner,
    RunnerRetention,
    RunnerRetentionTask,
    drop_keys,
    prune_rows,
)
from runner_svc.storage.sqlite_store import SqliteRunnerStore, StoreWriteError, make_engine
from turnwire.retention import PruneSchedule

A, B = "a" * 32, "b" * 32
DAY = 86400.0
WEEK = 7 * DAY
WINDOW_US = 7_000_000
NOW = time.time()
OLD = NOW - 8 * DAY  # released (or tombstoned) longer ago than a week


def admit(store: SqliteRunnerStore, op: str, stamp: int = 10) -> None:
    inc = store.incarnation_id
    store.write(op, Admit(op, inc, SlotKind.WRITABLE, "d" * 64, 1, 1, 1.0, stamp))


def settle(store: SqliteRunnerStore, op: str) -> None:
    inc = store.incarnation_id
    admit(store, op)
    store.write(op, LaunchIntent(inc))
    store.write(op, ConfirmStart(inc, 2.0))
    result = TurnOutput(b"out")
    store.write(op, Settle(inc, RowState.SUCCEEDED, Execution.STARTED, 3.0, result=result))


def release(store: SqliteRunnerStore, op: str, at: float) -> None:
    """Settle and release ``op``, its release recorded at ``at`` (the trigger stamps now)."""
    settle(store, op)
    store.write(op, Release())
    raw(store.path, "UPDATE runner_operations SET released_at = ? WHERE operation_id = ?", at, op)


def raw(path: Path, statement: str, *params: object) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as connection:
        return connection.execute(statement, params).fetchall()


def ids(path: Path, table: str = "runner_operations") -> set[str]:
    return {str(row[0]) for row in raw(path, f"SELECT operation_id FROM {table}")}


def prune(store: SqliteRunnerStore, *, now: float = NOW, limit: int = 500) -> list[str]:
    return store.maintain(
        lambda db: (
            gone := prune_rows(db, now=now, retain=WEEK, window_us=WINDOW_US, limit=limit),
            gone,
        )
    )


def drop(store: SqliteRunnerStore, *, now: float, retain: float = 30 * DAY) -> tuple[int, int]:
    return store.maintain(
        lambda db: (drop_keys(db, now=now, retain=retain, window_us=WINDOW_US, limit=500), [])
    )


def mixed_store(path: Path) -> SqliteRunnerStore:
    """One row of every kind: what goes and what stays."""
    store = SqliteRunnerStore.open(path, A)
    admit(store, "op_accepted")
    admit(store, "op_launching")
    store.write("op_launching", LaunchIntent(A))
    settle(store, "op_unreleased")  # the coordinator may still want this result
    raw(
        path,
        "UPDATE runner_operations SET settled_at = ? WHERE operation_id = ?",
        OLD,
        "op_unreleased",
    )
    release(store, "op_released_old", OLD)
    release(store, "op_released_new", NOW - DAY)
    store.write("op_tomb_old", Tombstone("op_tomb_old", A, 1, OLD))
    store.write("op_tomb_new", Tombstone("op_tomb_new", A, 1, NOW - DAY))
    return store


@pytest.mark.rule("K2")
def test_only_released_rows_and_tombstones_past_the_horizon_go(tmp_path: Path) -> None:
    """§9 K2: kept: accepted, launching, settled but unreleased (however old), released or
    tombstoned within the horizon; gone: released or tombstoned past it, each leaving its
    key with its stamp bound (the release or tombstone time plus the window)."""
    path = tmp_path / "r.db"
    store = mixed_store(path)
    try:
        assert sorted(prune(store)) == ["op_released_old", "op_tomb_old"]
        assert ids(path) == {
            "op_accepted",
            "op_launching",
            "op_unreleased",
            "op_released_new",
            "op_tomb_new",
        }
        keys = dict(raw(path, "SELECT operation_id, stamp_bound FROM runner_pruned_operations"))
        assert keys == {
            "op_released_old": stamp_bound(OLD, WINDOW_US),
            "op_tomb_old": stamp_bound(OLD, WINDOW_US),
        }
        assert prune(store) == []  # nothing else is due
    finally:
        store.close()


@pytest.mark.rule("K2")
def test_the_store_times_each_release_itself(tmp_path: Path) -> None:
    """§9 K2: the horizon runs from the release, which the database stamps the moment
    ``released`` turns true (a trigger), so no write path can leave it untimed."""
    path = tmp_path / "r.db"
    store = SqliteRunnerStore.open(path, A)
    try:
        settle(store, "op_x")
        assert raw(path, "SELECT released_at FROM runner_operations") == [(None,)]
        before = time.time()
        store.write("op_x", Release())
        after = time.time()
    finally:
        store.close()
    ((released_at,),) = raw(path, "SELECT released_at FROM runner_operations")
    assert before - 0.01 <= released_at <= after + 0.01


def test_pruning_keeps_the_row_digest_so_the_store_keeps_its_identity(tmp_path: Path) -> None:
    """§6: the store's count and digest follow every deletion, so the next opening still
    recognises its rows and keeps its store_id (a stale digest would void every proof)."""
    path = tmp_path / "r.db"
    store = mixed_store(path)
    original = store.store_id
    try:
        prune(store)
    finally:
        store.close()
    meta = raw(path, "SELECT row_count, row_digest FROM runner_store_meta")[0]
    assert meta == digest_of(ids(path))
    reopened = SqliteRunnerStore.open(path, B)
    try:
        assert reopened.store_id == original
    finally:
        reopened.close()


@pytest.mark.rule("K3")
def test_a_pruned_id_is_never_absent_and_never_admitted_or_tombstoned_again(
    tmp_path: Path,
) -> None:
    """§9 K3: the key outlives the row: a Dispatch's Admit and a Cancel's Tombstone for the
    id are refused OPERATION_PRUNED (writing nothing), and the store says it pruned it."""
    path = tmp_path / "r.db"
    store = SqliteRunnerStore.open(path, A)
    try:
        release(store, "op_x", OLD)
        assert store.mirror.row("op_x") is not None
        prune(store)
        assert store.mirror.row("op_x") is None  # memory forgot it with SQL
        assert store.get("op_x") is None
        assert store.pruned_among(["op_x", "op_never"]) == {"op_x"}
        for change in (
            Admit("op_x", A, SlotKind.WRITABLE, "d" * 64, 2, 1, 5.0, 10**18),
            Tombstone("op_x", A, 2, 5.0),
        ):
            with pytest.raises(RunnerRefusal) as refused:
                store.write("op_x", change)
            assert refused.value.refusal.value == "OPERATION_PRUNED"
        assert "op_x" not in ids(path)
        admit(store, "op_other")  # other ids are untouched
    finally:
        store.close()


@pytest.mark.rule("K4", "K5")
def test_a_key_goes_only_past_its_horizon_and_below_the_floor_then_no_owner_admits_it(
    tmp_path: Path,
) -> None:
    """§9 K4: a key waits for its own horizon and for the admission floor to pass its stamp
    bound; dropping it raises the retention floor, where the next owner's admission floor
    starts: a late Dispatch for the forgotten turn is DISPATCH_STALE there too, while a
    fresh one is admitted (K5's regime: the key is gone)."""
    path = tmp_path / "r.db"
    store = SqliteRunnerStore.open(path, A)
    bound = stamp_bound(OLD, WINDOW_US)
    try:
        release(store, "op_x", OLD)
        prune(store, now=OLD + WEEK)  # the key is written at OLD + WEEK
        assert drop(store, now=OLD + WEEK + 29 * DAY) == (0, 0)  # within its horizon
        later = OLD + WEEK + 31 * DAY
        assert store.advance_floor(bound - 1) == bound - 1
        assert drop(store, now=later) == (0, 1)  # due, but the floor is below its bound
        assert ids(path, "runner_pruned_operations") == {"op_x"}
        store.advance_floor(bound)
        assert drop(store, now=later) == (1, 0)
        assert ids(path, "runner_pruned_operations") == set()
    finally:
        store.close()
    assert raw(path, "SELECT retention_floor FROM runner_store_meta") == [(bound,)]
    successor = SqliteRunnerStore.open(path, B)
    try:
        assert successor.admission_floor() == bound  # not 0: it starts at the retention floor
        with pytest.raises(RunnerRefusal) as refused:
            successor.write(
                "op_x", Admit("op_x", B, SlotKind.WRITABLE, "d" * 64, 2, 1, 5.0, bound - 1)
            )
        assert refused.value.refusal.value == "DISPATCH_STALE"
        successor.write("op_x", Admit("op_x", B, SlotKind.WRITABLE, "d" * 64, 2, 1, 5.0, bound))
    finally:
        successor.close()


@pytest.mark.rule("K2", "K3", "K4")
@pytest.mark.parametrize(
    ("setup", "statement", "why"),
    [
        (
            "INSERT INTO runner_pruned_operations VALUES ('op_unreleased', 1, 1)",
            "DELETE FROM runner_operations WHERE operation_id = 'op_unreleased'",
            "settled and released",
        ),
        (
            "",
            "DELETE FROM runner_operations WHERE operation_id = 'op_released_old'",
            "key kept",
        ),
        (
            "INSERT INTO runner_pruned_operations VALUES ('op_gone', 5, 1)",
            "DELETE FROM runner_pruned_operations",
            "retention floor",
        ),
        (
            "UPDATE runner_store_meta SET retention_floor = 10",
            "UPDATE runner_store_meta SET retention_floor = 9",
            "never goes down",
        ),
        (
            "INSERT INTO runner_pruned_operations VALUES ('op_gone', 5, 1)",
            "INSERT INTO runner_operations (operation_id, state, execution, incarnation_id, "
            "sequence, fencing_token, attempt, envelope_digest, released) "
            "VALUES ('op_gone', 'ACCEPTED', 'NOT_STARTED', 'x', 999, 1, 1, 'd', 0)",
            "operation pruned",
        ),
    ],
    ids=["unreleased-row", "row-without-key", "key-above-floor", "floor-down", "row-for-key"],
)
def test_the_database_refuses_forgetting_what_the_rule_keeps(
    tmp_path: Path, setup: str, statement: str, why: str
) -> None:
    """§9 K2-K4 in the database: whoever writes (a bug, a hand-run statement), it refuses
    deleting a row that is not prunable or whose key is not kept, dropping a key above the
    retention floor, lowering that floor, and writing a row for a pruned id."""
    path = tmp_path / "r.db"
    mixed_store(path).close()
    if setup:
        raw(path, setup)
    with pytest.raises(sqlite3.IntegrityError, match=why):
        raw(path, statement)


def test_a_failing_batch_deletes_nothing_and_keeps_the_digest(tmp_path: Path) -> None:
    """Fail closed: a database failure in the middle of a batch (writing its second key)
    rolls the whole batch back: every row, no key, the count and digest as they were."""
    path = tmp_path / "r.db"
    store = SqliteRunnerStore.open(path, A)
    try:
        for op in ("op_1", "op_2", "op_3"):
            release(store, op, OLD)
        before = (ids(path), raw(path, "SELECT row_count, row_digest FROM runner_store_meta"))
        raw(
            path,
            "CREATE TRIGGER fail_prune BEFORE INSERT ON runner_pruned_operations "
            "WHEN NEW.operation_id = 'op_2' "
            "BEGIN SELECT RAISE(ABORT, 'simulated storage failure'); END",
        )
        with pytest.raises(StoreWriteError, match="simulated storage failure"):
            prune(store)
        assert (ids(path), raw(path, "SELECT row_count, row_digest FROM runner_store_meta")) == (
            before
        )
        assert ids(path, "runner_pruned_operations") == set()
        assert store.get("op_1") is not None  # still served, from SQL
        raw(path, "DROP TRIGGER fail_prune")
        assert len(prune(store)) == 3
    finally:
        store.close()


def test_a_fenced_incarnation_prunes_nothing(tmp_path: Path) -> None:
    """§6 fencing: retention writes like every write, only as the store's owner."""
    path = tmp_path / "r.db"
    old = SqliteRunnerStore.open(path, A, acquire_lock=False)
    release(old, "op_x", OLD)
    newer = SqliteRunnerStore.open(path, B, acquire_lock=False)
    try:
        with pytest.raises(StoreWriteError, match="may not write"):
            prune(old)
        assert "op_x" in ids(path)
    finally:
        newer.close()
        old.close()


def _pruner(store: AsyncRunnerStore, batch: int, batches: int) -> RunnerPruner:
    retention = RunnerRetention(WEEK, 30 * DAY, PruneSchedule(batch=batch, batches_per_run=batches))
    return RunnerPruner(store, retention, window_seconds=7.0)


def test_batches_are_bounded_and_a_pass_stops_at_its_limit(tmp_path: Path) -> None:
    """At most ``batch`` rows per transaction and ``batches_per_run`` per pass; the rest
    waits for the next pass, which says there was more."""
    path = tmp_path / "r.db"
    sync = SqliteRunnerStore.open(path, A)
    for number in range(7):
        release(sync, f"op_{number}", OLD + number)

    async def passes() -> None:
        store = AsyncRunnerStore(sync)
        try:
            pruner = _pruner(store, batch=3, batches=2)
            first = await pruner.prune()
            assert (first.counts["rows"], first.batches, first.more) == (6, 2, True)
            assert ids(path) == {"op_6"}  # oldest release first
            second = await pruner.prune()
            assert (second.counts["rows"], second.more) == (1, False)
        finally:
            await store.close()

    asyncio.run(passes())
    assert ids(path) == set()
    assert len(ids(path, "runner_pruned_operations")) == 7


def test_the_scheduled_pass_logs_what_it_pruned_and_warns_when_it_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One INFO line per pass that pruned something, none for a pass with nothing to do,
    a WARNING for a pass that failed (its batch rolled back)."""
    path = tmp_path / "r.db"
    sync = SqliteRunnerStore.open(path, A)
    release(sync, "op_1", OLD)
    release(sync, "op_2", OLD)
    raw(
        path,
        "CREATE TRIGGER fail_prune BEFORE DELETE ON runner_operations "
        "BEGIN SELECT RAISE(ABORT, 'simulated storage failure'); END",
    )

    async def passes() -> None:
        store = AsyncRunnerStore(sync)
        retention = RunnerRetention(WEEK, 30 * DAY, PruneSchedule(interval_seconds=3600))
        task = RunnerRetentionTask(RunnerPruner(store, retention, window_seconds=7.0), retention)
        try:
            assert await task.schedule.run_once() is None
            raw(path, "DROP TRIGGER fail_prune")
            report = await task.schedule.run_once()
            assert report is not None and report.counts["rows"] == 2
            assert await task.schedule.run_once() is not None
        finally:
            await task.stop()
            await store.close()

    with caplog.at_level(logging.INFO, logger="runner_svc.retention"):
        asyncio.run(passes())
    # Only the pass's own lines: an earlier test in this process may have left the
    # root logger at INFO (a service's main() configures logging), and then
    # alembic's INFO lines from opening the store are captured too.
    lines = [
        (r.levelname, r.getMessage()) for r in caplog.records if r.name == "runner_svc.retention"
    ]
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert "simulated storage failure" in lines[0][1]
    assert "pruned 2 rows, 0 keys, 0 unreleased rows, 0 executor records in" in lines[1][1]


def test_the_retention_revision_walks_down_and_up_and_times_earlier_releases(
    tmp_path: Path,
) -> None:
    """Migration r0004: rows released before it get the migration's time (later than their
    real release: their horizon only grows); it downgrades (the old guard back) and
    upgrades again."""
    path = tmp_path / "r.db"
    store = SqliteRunnerStore.open(path, A)
    release(store, "op_x", OLD)
    store.close()
    engine = make_engine(path)
    try:
        with engine.connect() as connection:
            migrate.downgrade_to(connection, "r0003")
            connection.commit()
        with pytest.raises(sqlite3.IntegrityError, match="never deleted"):
            raw(path, "DELETE FROM runner_operations")
        before = time.time()
        with engine.connect() as connection:
            migrate.upgrade_to_head(connection)
            connection.commit()
    finally:
        engine.dispose()
    ((released_at,),) = raw(path, "SELECT released_at FROM runner_operations")
    assert isinstance(released_at, float) and released_at >= before
    reopened = SqliteRunnerStore.open(path, B)
    reopened.close()
