"""The journal forgets finished operations past the idempotency horizon (PROTOCOL.md §9 K1).

What may go, all three at once: the operation is terminal (C10: it has no
outgoing edge, the dispatcher never sends anything for it again), released
(nothing is owed to its runner, C10: an unreleased one still owes a Release,
and forgetting it would leave the runner's result kept for ever), and it
finished longer ago than the horizon. It goes whole: its events, its attempts,
its row, in one transaction. After that its id is NOT_FOUND and its
idempotency key is free: a SubmitTurn with that key is a new operation. That
is the horizon's meaning (§7, §9), not a replay: no operation id is ever
reused, so no runner's row for the old one can be mistaken for the new.

How, on SQLite and PostgreSQL alike (SQLAlchemy Core, its own engine, so the
journal's kept connections and group commit are untouched):

- a batch is one transaction: pick at most ``batch`` ids oldest first (on
  PostgreSQL ``FOR UPDATE SKIP LOCKED``, so replicas pruning at once split the
  work; on SQLite ``BEGIN IMMEDIATE`` holds the one write lock), delete their
  events and attempts, then the rows, the three conditions checked again in
  that DELETE. Anything unexpected (a row that changed, a database error)
  raises and the batch rolls back whole: nothing is half deleted;
- a pass runs at most ``batches_per_run`` batches and asks ``keep_going``
  between them (a stopping coordinator ends the pass after its batch);
- the database refuses deleting anything else, whoever asks (0003's trigger).

The coordinator's write-through cache (cached.py) is told each batch's ids
and drops them, so a pruned operation is NOT_FOUND at once everywhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from coordinator_svc.core.model import TERMINAL_STATES
from coordinator_svc.ports import JournalUnavailable
from coordinator_svc.retention_flags import JournalRetention
from coordinator_svc.storage import schema
from coordinator_svc.storage.backends import READ_ONLY
from coordinator_svc.storage.tables import attempts, events, operation_envelopes, operations
from turnwire.retention import PruneReport, describe_horizon
from turnwire.retention_task import ScheduledPrune

log = logging.getLogger("coordinator_svc.retention")

_TERMINAL = sorted(state.value for state in TERMINAL_STATES)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _always() -> bool:
    return True


class PruneConflict(JournalUnavailable):
    """A batch found the journal other than it read it a moment before; rolled back."""


def retired(cutoff: datetime) -> sa.ColumnElement[bool]:
    """K1's three conditions: terminal, released, finished before ``cutoff``."""
    return sa.and_(
        operations.c.state.in_(_TERMINAL),
        operations.c.released == sa.true(),
        operations.c.finished_at < cutoff,
    )


class JournalPruner:
    """Deletes retired operations from the journal at a URL. Make one with ``open``."""

    def __init__(
        self,
        engine: Engine,
        retention: JournalRetention,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        if retention.horizon_seconds is None:
            raise ValueError("a pruner needs a horizon (None keeps everything)")
        self._engine = engine
        self._horizon = timedelta(seconds=retention.horizon_seconds)
        self._schedule = retention.schedule
        self._clock = clock

    @classmethod
    def open(
        cls,
        url: str,
        retention: JournalRetention,
        *,
        busy_timeout: float = 5.0,
        clock: Callable[[], datetime] = _utc_now,
    ) -> JournalPruner:
        """Its own engine on the journal at ``url``; refuses a schema it does not expect,
        as ``open_journal`` does (JournalNotMigrated, SchemaTooNew, JournalUnavailable)."""
        engine, _ = schema.open_checked_engine(url, busy_timeout)
        return cls(engine, retention, clock)

    def cutoff(self) -> datetime:
        """Operations that finished before this are past the horizon."""
        return self._clock() - self._horizon

    # -- one batch: one transaction (a worker thread) ---------------------------

    def prune_batch(self, cutoff: datetime) -> tuple[list[str], int, int]:
        """(operation ids, events, attempts) deleted by one transaction; raises (and
        deletes nothing) on any database error or surprise."""
        try:
            with self._engine.begin() as connection:
                return self._delete_batch(connection, cutoff)
        except sa.exc.SQLAlchemyError as error:
            raise JournalUnavailable(f"prune batch rolled back: {error}") from error

    def _delete_batch(
        self, connection: sa.Connection, cutoff: datetime
    ) -> tuple[list[str], int, int]:
        chosen = (
            sa.select(operations.c.operation_id)
            .where(retired(cutoff))
            .order_by(operations.c.finished_at, operations.c.operation_id)
            .limit(self._schedule.batch)
            .with_for_update(skip_locked=True)  # PostgreSQL; SQLite holds its write lock
        )
        ids = list(connection.execute(chosen).scalars())
        if not ids:
            return [], 0, 0
        gone_events = connection.execute(events.delete().where(events.c.operation_id.in_(ids)))
        gone_attempts = connection.execute(
            attempts.delete().where(attempts.c.operation_id.in_(ids))
        )
        connection.execute(
            operation_envelopes.delete().where(operation_envelopes.c.operation_id.in_(ids))
        )
        gone = connection.execute(
            operations.delete().where(operations.c.operation_id.in_(ids), retired(cutoff))
        )
        if gone.rowcount != len(ids):
            # Rows picked a moment ago under this transaction's lock no longer match:
            # never guess; the context manager rolls the whole batch back.
            raise PruneConflict(f"picked {len(ids)} operations to prune, {gone.rowcount} matched")
        return ids, gone_events.rowcount, gone_attempts.rowcount

    # -- a pass ----------------------------------------------------------------------

    async def prune(
        self,
        keep_going: Callable[[], bool] = _always,
        forget: Callable[[Sequence[str]], None] | None = None,
    ) -> PruneReport:
        """Up to ``batches_per_run`` batches, each in a worker thread, until one finds
        less than a full batch or ``keep_going()`` says stop. ``forget`` is told each
        committed batch's ids (the coordinator's cache drops them)."""
        started = time.monotonic()
        cutoff = self.cutoff()  # one cutoff per pass: every batch agrees on the horizon
        totals = {"operations": 0, "events": 0, "attempts": 0}
        batches, more = 0, False
        while batches < self._schedule.batches_per_run:
            ids, evs, atts = await asyncio.to_thread(self.prune_batch, cutoff)
            if ids and forget is not None:
                forget(ids)
            ops = len(ids)
            batches += 1
            totals["operations"] += ops
            totals["events"] += evs
            totals["attempts"] += atts
            more = ops == self._schedule.batch
            if not more or not keep_going():
                break
        return PruneReport(totals, time.monotonic() - started, batches, more=more)

    def count(self) -> dict[str, int]:
        """What a pass with no batch bound would delete now (``prune --dry-run``)."""
        cutoff = self.cutoff()
        ids = sa.select(operations.c.operation_id).where(retired(cutoff))
        try:
            with self._engine.connect() as connection:
                connection.execution_options(**{READ_ONLY: True})
                with connection.begin():
                    return {
                        "operations": _count(connection, operations, retired(cutoff)),
                        "events": _count(connection, events, events.c.operation_id.in_(ids)),
                        "attempts": _count(connection, attempts, attempts.c.operation_id.in_(ids)),
                    }
        except sa.exc.SQLAlchemyError as error:
            raise JournalUnavailable(f"cannot read the journal: {error}") from error

    def close(self) -> None:
        self._engine.dispose()


def _count(connection: sa.Connection, table: sa.Table, where: sa.ColumnElement[bool]) -> int:
    found = connection.execute(sa.select(sa.func.count()).select_from(table).where(where))
    return int(found.scalar_one())


class JournalRetentionTask:
    """The coordinator's scheduled pass (app.py starts and stops it).

    It opens its pruner on the first run, not at start: a journal the
    coordinator just opened will open again, and if it does not, the failure
    is the run's WARNING, never a coordinator that will not start."""

    def __init__(
        self,
        url: str,
        retention: JournalRetention,
        clock: Callable[[], datetime] = _utc_now,
        forget: Callable[[Sequence[str]], None] | None = None,
    ) -> None:
        self._url = url
        self._forget = forget
        self._retention = retention
        self._clock = clock
        self._pruner: JournalPruner | None = None
        self.schedule = ScheduledPrune(
            "journal retention", self._pass, retention.schedule.interval_seconds, log
        )

    @classmethod
    def started(
        cls,
        url: str,
        retention: JournalRetention,
        clock: Callable[[], datetime] = _utc_now,
        forget: Callable[[Sequence[str]], None] | None = None,
    ) -> JournalRetentionTask | None:
        """Started on the running loop, or None when the horizon is 'never'. ``forget``:
        told the ids each batch deleted (app.py: the write-through cache drops them, so
        GetOperation says NOT_FOUND at once, not once they are evicted)."""
        if retention.horizon_seconds is None:
            log.info("journal retention off: finished operations are kept for ever")
            return None
        task = cls(url, retention, clock, forget)
        log.info(
            "journal retention: terminal, released operations are forgotten %s after they "
            "finish (their idempotency keys with them); a pass every %s",
            describe_horizon(retention.horizon_seconds),
            describe_horizon(retention.schedule.interval_seconds),
        )
        task.schedule.start()
        return task

    async def _pass(self, keep_going: Callable[[], bool]) -> PruneReport:
        if self._pruner is None:
            self._pruner = await asyncio.to_thread(
                JournalPruner.open, self._url, self._retention, clock=self._clock
            )
        return await self._pruner.prune(keep_going, self._forget)

    async def stop(self) -> None:
        await self.schedule.stop()
        if self._pruner is not None:
            pruner, self._pruner = self._pruner, None
            await asyncio.to_thread(pruner.close)
