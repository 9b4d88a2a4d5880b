"""The runner store forgets released rows and tombstones, then their keys (PROTOCOL.md §9).

The rules are pure (``runner_svc.core.retention``); this is their SQL, run on
the store's one connection and thread (``SqliteRunnerStore.maintain``): each
batch one ``BEGIN IMMEDIATE`` transaction, fenced like every write (§6: only
the store's owner prunes), all or nothing. A batch:

- **rows** (K2): picks at most ``batch`` rows released (or tombstoned) longer
  than ``--retain-released`` ago, oldest first; for each it writes the bare key
  with its stamp bound (K3, K4) and deletes the row, and it takes the rows out
  of the store's count and digest (§6: a store whose rows are not the set it
  wrote gets a new store_id at its next opening, so the pair must follow every
  deletion); the mirror forgets them once the COMMIT is durable;
- **rows nobody will release** (K6): at most ``batch`` rows settled and never
  released, or left unsettled by an earlier incarnation, unchanged for
  ``--retain-unreleased``; each keeps its key for ever (never dropped by K4);
- **executor records** (R10): those of groups known to be over (ended by a
  sweep, or their turn settled or pruned) launched ``--retain-released`` ago;
- **keys** (K4): drops at most ``batch`` keys kept longer than
  ``--retain-pruned-keys`` whose stamp bound is below the owner's admission
  floor, raising the retention floor to their highest bound first (every later
  owner starts its admission floor there).

Every candidate SQL picks is confirmed by the pure rule before anything is
written, and the database's own triggers refuse deleting a row that is not
prunable or has no key, and dropping a key above the retention floor
(migration r0004): a disagreement raises and the batch rolls back.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from runner_svc.core.model import RowState
from runner_svc.core.retention import (
    KEPT_FOR_EVER,
    abandoned_since,
    key_ceiling,
    key_droppable,
    retired_since,
    row_prunable,
    stamp_bound,
)
from runner_svc.core.witness import remove_from_digest
from runner_svc.storage.async_store import AsyncRunnerStore
from turnwire.retention import PruneReport, PruneSchedule, describe_horizon
from turnwire.retention_task import ScheduledPrune

log = logging.getLogger("runner_svc.retention")

DAY = 86400.0


@dataclass(frozen=True)
class RunnerRetention:
    """How long a released row (or tombstone) is kept, then its bare key; None: for ever."""

    retain_released_seconds: float | None = 7 * DAY
    retain_keys_seconds: float | None = 30 * DAY
    schedule: PruneSchedule = field(default_factory=PruneSchedule)
    # K6: a row no Release will retire (settled and never released, or left
    # unsettled by an earlier incarnation) goes this long after it last changed,
    # its key kept for ever. Longer than the released horizon: only time vouches
    # that no coordinator still waits for it.
    retain_unreleased_seconds: float | None = 30 * DAY


# One stage's batch: (connection, now=, limit=) -> (how many went, ids of rows deleted).
_Stage = Callable[..., tuple[int, list[str]]]


class RetentionError(RuntimeError):
    """SQL picked what the rule refuses: never guess, roll the batch back."""


_RELEASED = (
    "SELECT operation_id, state, released, settled_at, released_at FROM runner_operations "
    "WHERE released_at IS NOT NULL AND released_at <= ? ORDER BY released_at LIMIT ?"
)
_TOMBSTONES = (
    "SELECT operation_id, state, released, settled_at, released_at FROM runner_operations "
    "WHERE state = 'TOMBSTONED' AND settled_at <= ? ORDER BY settled_at LIMIT ?"
)
# K6: unreleased rows (the partial index of r0005 holds just these), settled ones
# and those an earlier incarnation (not the store's owner) left unsettled.
_ABANDONED = (
    "SELECT operation_id, state, incarnation_id = ?, accepted_at, started_at, settled_at "
    "FROM runner_operations WHERE NOT released AND ("
    "(state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT') AND settled_at <= ?) OR "
    "(state IN ('ACCEPTED', 'LAUNCHING', 'RUNNING') AND incarnation_id <> ? AND "
    "max(coalesce(accepted_at, 0), coalesce(started_at, 0)) <= ?)) "
    "ORDER BY operation_id LIMIT ?"
)
_OWNER = "SELECT owner_incarnation_id FROM runner_store_meta"
# Executor records whose group is over (ended by a sweep, or its turn settled or
# pruned: a turn settles only after its group was killed and its leader reaped).
_DONE_EXECUTORS = (
    "DELETE FROM runner_executor_processes WHERE id IN (SELECT e.id FROM "
    "runner_executor_processes e LEFT JOIN runner_operations o ON o.operation_id = "
    "e.operation_id WHERE e.launched_at <= ? AND (e.ended_at IS NOT NULL OR o.state IN "
    "('SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT', 'TOMBSTONED') OR (o.operation_id "
    "IS NULL AND EXISTS (SELECT 1 FROM runner_pruned_operations k WHERE k.operation_id = "
    "e.operation_id))) ORDER BY e.id LIMIT ?)"
)
_KEEP_KEY = "INSERT INTO runner_pruned_operations VALUES (?, ?, ?)"
_DELETE_ROW = "DELETE FROM runner_operations WHERE operation_id = ?"
_META = "SELECT row_count, row_digest, admission_floor, retention_floor FROM runner_store_meta"
_SET_ROWS = "UPDATE runner_store_meta SET row_count = ?, row_digest = ?"
_KEYS = (
    "SELECT operation_id, stamp_bound, pruned_at FROM runner_pruned_operations "
    "WHERE pruned_at <= ? AND stamp_bound <= ? ORDER BY pruned_at LIMIT ?"
)
_SET_RETENTION_FLOOR = "UPDATE runner_store_meta SET retention_floor = ?"
_DROP_KEY = "DELETE FROM runner_pruned_operations WHERE operation_id = ?"


def prune_rows(
    db: sqlite3.Connection, *, now: float, retain: float, window_us: int, limit: int
) -> list[str]:
    """K2/K3 in the open transaction: the ids whose rows went (their keys kept)."""
    cutoff = now - retain
    picked = db.execute(_RELEASED, (cutoff, limit)).fetchall()
    if len(picked) < limit:
        picked += db.execute(_TOMBSTONES, (cutoff, limit - len(picked))).fetchall()
    if not picked:
        return []
    row_count, row_digest, _, _ = db.execute(_META).fetchone()
    gone: list[str] = []
    for operation_id, state, released, settled_at, released_at in picked:
        since = retired_since(RowState(state), bool(released), settled_at, released_at)
        if since is None or not row_prunable(since, now, retain):
            raise RetentionError(f"{operation_id}: picked for pruning, but {state} is not due")
        db.execute(_KEEP_KEY, (operation_id, stamp_bound(since, window_us), now))
        db.execute(_DELETE_ROW, (operation_id,))
        row_count -= 1
        row_digest = remove_from_digest(int(row_digest), operation_id)
        gone.append(operation_id)
    db.execute(_SET_ROWS, (row_count, row_digest))
    return gone


def prune_abandoned(db: sqlite3.Connection, *, now: float, retain: float, limit: int) -> list[str]:
    """K6 in the open transaction: rows no Release will retire, frozen for ``retain``
    seconds, go; each keeps its key for ever (stamp bound KEPT_FOR_EVER)."""
    (owner,) = db.execute(_OWNER).fetchone()
    cutoff = now - retain
    picked = db.execute(_ABANDONED, (owner, cutoff, owner, cutoff, limit)).fetchall()
    if not picked:
        return []
    row_count, row_digest, _, _ = db.execute(_META).fetchone()
    gone: list[str] = []
    for operation_id, state, by_owner, accepted_at, started_at, settled_at in picked:
        since = abandoned_since(
            RowState(state),
            False,
            written_by_owner=bool(by_owner),
            accepted_at=accepted_at,
            started_at=started_at,
            settled_at=settled_at,
        )
        if since is None or not row_prunable(since, now, retain):
            raise RetentionError(f"{operation_id}: picked as abandoned, but {state} is not due")
        db.execute(_KEEP_KEY, (operation_id, KEPT_FOR_EVER, now))
        db.execute(_DELETE_ROW, (operation_id,))
        row_count -= 1
        row_digest = remove_from_digest(int(row_digest), operation_id)
        gone.append(operation_id)
    db.execute(_SET_ROWS, (row_count, row_digest))
    return gone


def prune_executor_records(db: sqlite3.Connection, *, now: float, retain: float, limit: int) -> int:
    """Executor records (R10) of groups known to be over, launched ``retain`` ago:
    no sweep needs them any more."""
    return max(db.execute(_DONE_EXECUTORS, (now - retain, limit)).rowcount, 0)


def drop_keys(
    db: sqlite3.Connection, *, now: float, retain: float, window_us: int, limit: int
) -> tuple[int, int]:
    """K4 in the open transaction: (keys dropped, keys due but still above the floor)."""
    _, _, floor, retention_floor = db.execute(_META).fetchone()
    ceiling = key_ceiling(int(floor), now, window_us)
    picked = db.execute(_KEYS, (now - retain, ceiling, limit)).fetchall()
    for operation_id, bound, pruned_at in picked:
        if not key_droppable(pruned_at, int(bound), now, retain, int(floor), window_us):
            raise RetentionError(f"{operation_id}: key picked for dropping, but it is not due")
    if picked:
        highest = max(int(bound) for _, bound, _ in picked)
        # First the floor (the trigger drops a key only below it), then the keys.
        db.execute(_SET_RETENTION_FLOOR, (max(int(retention_floor), highest),))
        db.executemany(_DROP_KEY, [(operation_id,) for operation_id, _, _ in picked])
    waiting = db.execute(
        "SELECT count(*) FROM runner_pruned_operations WHERE pruned_at <= ? AND stamp_bound > ?"
        " AND stamp_bound < ?",
        (now - retain, ceiling, KEPT_FOR_EVER),
    ).fetchone()[0]
    return len(picked), int(waiting)


class RunnerPruner:
    """Batches of rows, then of keys, on the store's thread, per the settings."""

    def __init__(
        self,
        store: AsyncRunnerStore,
        retention: RunnerRetention,
        *,
        window_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._retention = retention
        self._window_us = int(window_seconds * 1_000_000)
        self._clock = clock

    async def prune(self, keep_going: Callable[[], bool] = lambda: True) -> PruneReport:
        """Rows (K2), rows nobody released (K6), executor records (K7), then keys (K4):
        each stage in batches of one transaction, until one finds less than a full
        batch; at most ``batches_per_run`` in all, asking ``keep_going`` between them."""
        started = time.monotonic()
        retention, window_us = self._retention, self._window_us
        schedule = retention.schedule
        counts: dict[str, int] = {}
        batches, more, waiting = 0, False, 0

        async def stage(kind: str, work: _Stage) -> None:
            nonlocal batches, more
            counts[kind] = 0
            if more:
                return  # an earlier stage stopped with more left: the next pass goes on
            while batches < schedule.batches_per_run:
                if batches and not keep_going():
                    return
                now = self._clock()
                done = await self._store.maintain(partial(work, now=now, limit=schedule.batch))
                batches += 1
                counts[kind] += done
                more = done == schedule.batch
                if not more:
                    return

        def rows(db: sqlite3.Connection, *, now: float, limit: int) -> tuple[int, list[str]]:
            assert retain_rows is not None
            gone = prune_rows(db, now=now, retain=retain_rows, window_us=window_us, limit=limit)
            return len(gone), gone

        def unreleased(db: sqlite3.Connection, *, now: float, limit: int) -> tuple[int, list[str]]:
            assert retain_unreleased is not None
            gone = prune_abandoned(db, now=now, retain=retain_unreleased, limit=limit)
            return len(gone), gone

        def executors(db: sqlite3.Connection, *, now: float, limit: int) -> tuple[int, list[str]]:
            assert retain_rows is not None
            return prune_executor_records(db, now=now, retain=retain_rows, limit=limit), []

        def keys(db: sqlite3.Connection, *, now: float, limit: int) -> tuple[int, list[str]]:
            nonlocal waiting
            assert retain_keys is not None
            dropped, waiting = drop_keys(
                db, now=now, retain=retain_keys, window_us=window_us, limit=limit
            )
            return dropped, []

        retain_rows = retention.retain_released_seconds
        retain_keys = retention.retain_keys_seconds
        retain_unreleased = retention.retain_unreleased_seconds
        if retain_rows is not None:
            await stage("rows", rows)
        counts.setdefault("rows", 0)
        if retain_keys is not None:
            counts["keys"] = 0  # its stage runs last; the report names it second
        if retain_unreleased is not None:
            await stage("unreleased rows", unreleased)
        if retain_rows is not None:
            await stage("executor records", executors)
        if retain_keys is not None:
            await stage("keys", keys)
        counts.setdefault("keys", 0)
        note = f"{waiting} key(s) wait for the admission floor" if waiting else ""
        return PruneReport(counts, time.monotonic() - started, batches, more=more, note=note)


class RunnerRetentionTask:
    """The runner's scheduled pass (app.py starts it once serving, stops it first)."""

    def __init__(self, pruner: RunnerPruner, retention: RunnerRetention) -> None:
        self.pruner = pruner
        self.schedule = ScheduledPrune(
            "runner retention", pruner.prune, retention.schedule.interval_seconds, log
        )

    @classmethod
    def started(
        cls, store: AsyncRunnerStore, retention: RunnerRetention, *, window_seconds: float
    ) -> RunnerRetentionTask | None:
        if retention.retain_released_seconds is None:
            log.info("runner retention off: released rows and tombstones are kept for ever")
            return None
        log.info(
            "runner retention: released rows and tombstones are pruned %s after their "
            "release, their bare keys %s later (then only once the admission floor has "
            "passed them); rows never released %s after they last changed (keys kept for "
            "ever); a pass every %s",
            describe_horizon(retention.retain_released_seconds),
            describe_horizon(retention.retain_keys_seconds),
            describe_horizon(retention.retain_unreleased_seconds),
            describe_horizon(retention.schedule.interval_seconds),
        )
        task = cls(RunnerPruner(store, retention, window_seconds=window_seconds), retention)
        task.schedule.start()
        return task

    async def stop(self) -> None:
        await self.schedule.stop()
