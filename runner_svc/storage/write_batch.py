"""Several row writes in one SQLite transaction: one fsync for all (group commit, issue 10).

The store's thread takes every write queued while it was busy (or issued in
the same turn of the event loop, e.g. a Release carried on a Dispatch and
that Dispatch's admission) and lands them with one ``BEGIN IMMEDIATE`` ...
``COMMIT``. Each write keeps its own all-or-nothing outcome:

- it runs inside its own SAVEPOINT, so one that is illegal (IllegalRowEvent),
  below the admission floor or refused by SQLite is rolled back alone and
  raises for its caller, while the others go on;
- nothing is reported before the COMMIT: a write's caller learns "written"
  only once its row is durable (R3, R7), exactly as with one write per
  transaction; a COMMIT that fails fails every write of the batch (none of
  them is known to have landed, and the mirror stops answering: mirror.py);
- the ownership check (§6 fencing) is made once, at the start of the
  transaction, which holds SQLite's write lock until the COMMIT: no other
  process can open the store in between. Fenced, every write fails.

The meta row is read once, with the ownership check; each write's
sequence, the row count and digest follow the writes before it in the
batch, and a rolled-back write leaves no gap (they move on only when a
write's SQL all succeeded). A write's current row comes from the batch's
earlier writes, else from the mirror when it is current (the runner is the
store's only writer, so memory holds what SQL holds), else from SQL.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner_svc.core.model import OperationRow
from runner_svc.core.retention import PRUNED_MARK, pruned_refusal
from runner_svc.core.transitions import RowEvent, apply
from runner_svc.core.witness import add_to_digest
from runner_svc.storage import rows_sql
from runner_svc.storage.mirror import StoreMirror
from runner_svc.storage.witness_sql import LaunchBelowFloorError, check_floor

log = logging.getLogger("runner_svc.store")

# What one write of a batch came to: its new row, or the exception its caller gets.
Outcome = OperationRow | Exception


@dataclass
class _Meta:
    """The store's meta row as this transaction has it so far."""

    last: int
    floor: int
    row_count: int
    row_digest: int


@dataclass
class _Batch:
    """One transaction's view: the meta row, and the rows as it leaves them."""

    meta: _Meta
    # The mirror when it is current (it holds the store's committed rows); None
    # when it lost track, and every row is read from SQL.
    mirror: StoreMirror | None
    written: dict[str, OperationRow] = field(default_factory=dict)

    def row(self, db: sqlite3.Connection, operation_id: str) -> OperationRow | None:
        """The row before this write: as an earlier write of the batch left it, else
        from memory (the runner is its store's only writer), else from SQL."""
        if operation_id in self.written:
            return self.written[operation_id]
        if self.mirror is not None and (held := self.mirror.row(operation_id)) is not None:
            return held
        found = db.execute(rows_sql.SELECT_ROW, (operation_id,)).fetchone()
        return rows_sql.to_row(found) if found is not None else None


class BatchWriter:
    """Applies batches of row changes on one raw connection (the caller holds its lock)."""

    def __init__(
        self,
        db: sqlite3.Connection,
        path: Path,
        check_owner: Callable[[str], None],
        write_error: Callable[[str], Exception],
    ) -> None:
        self._db = db
        self._path = path
        self._check_owner = check_owner
        self._write_error = write_error

    def write(self, items: Sequence[tuple[str, RowEvent]], mirror: StoreMirror) -> list[Outcome]:
        """One outcome per item, in order (``mirror`` follows what lands); raises
        only what is not an Exception."""
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            return self._all_failed(items, f"write failed: {exc}", exc)
        try:
            meta = self._owned_meta()
            last = meta.last
            # A mirror that lost track (a failed COMMIT) starts again from where
            # the store really is: its counter and its newest row.
            current_mirror = mirror.is_current(last)
            newest = 0
            if not current_mirror:
                newest = int(db.execute(rows_sql.SELECT_NEWEST_ROW).fetchone()[0])
            batch = _Batch(meta, mirror if current_mirror else None)
            if len(items) == 1:
                # Alone: the transaction is the savepoint (a failure rolls it all back).
                outcomes: list[Outcome] = [self._one(batch, *items[0])]
            else:
                outcomes = [self._in_savepoint(batch, op, change) for op, change in items]
        except BaseException as exc:
            # Fenced, the meta row gone, or a savepoint that could not roll
            # back: nothing is committed, the mirror stays as it was (a fence
            # turned it off), and every write fails closed.
            self._rollback()
            if not isinstance(exc, Exception):
                raise
            if isinstance(exc, sqlite3.Error):
                return self._all_failed(items, f"write failed: {exc}", exc)
            copies: list[Outcome] = [self._copy(exc) for _ in items[1:]]
            return [exc, *copies]  # e.g. StoreFencedError each
        if not any(isinstance(outcome, OperationRow) for outcome in outcomes):
            self._rollback()  # nothing to keep
            return outcomes
        try:
            db.execute("COMMIT")
        except BaseException as exc:
            self._rollback()
            # It may or may not have landed: the mirror stops answering until
            # the next write finds the store's sequence again.
            mirror.lose_track()
            if not isinstance(exc, Exception):
                raise
            return [
                self._chained(self._write_error(f"commit failed: {exc}"), exc)
                if isinstance(outcome, OperationRow)
                else outcome
                for outcome in outcomes
            ]
        if not current_mirror:
            mirror.rebase(last, newest)
        for outcome in outcomes:
            if isinstance(outcome, OperationRow):
                mirror.written(outcome)
        return outcomes

    def _owned_meta(self) -> _Meta:
        meta = self._db.execute(rows_sql.SELECT_META).fetchone()
        if meta is None:
            raise self._write_error("its meta row is missing")
        owner, last, floor, row_count, row_digest = meta
        self._check_owner(str(owner))
        return _Meta(int(last), int(floor), int(row_count), int(row_digest))

    def _in_savepoint(self, batch: _Batch, operation_id: str, change: RowEvent) -> Outcome:
        db = self._db
        db.execute("SAVEPOINT one_write")
        outcome = self._one(batch, operation_id, change)
        if isinstance(outcome, OperationRow):
            db.execute("RELEASE one_write")
        else:
            # Raises (ending the whole batch) if even this fails.
            db.execute("ROLLBACK TO one_write")
            db.execute("RELEASE one_write")
        return outcome

    def _one(self, batch: _Batch, operation_id: str, change: RowEvent) -> Outcome:
        """One write's SQL inside the open transaction: its row, or why it failed.
        The batch's meta and rows move on only once all of its SQL succeeded."""
        db = self._db
        meta = batch.meta
        try:
            current = batch.row(db, operation_id)
            check_floor(current, change, meta.floor, operation_id)
            new = apply(current, change, operation_id)
            sequence = meta.last + 1
            params = rows_sql.to_params(new, sequence)
            if current is None:
                db.execute(rows_sql.INSERT_ROW, params)
                digest = add_to_digest(meta.row_digest, operation_id)
                db.execute(rows_sql.UPDATE_META_INSERTED, (sequence, meta.row_count + 1, digest))
                meta.row_count, meta.row_digest = meta.row_count + 1, digest
            else:
                db.execute(rows_sql.UPDATE_ROW, rows_sql.update_params(params))
                db.execute(rows_sql.UPDATE_META_SEQUENCE, (sequence,))
        except sqlite3.IntegrityError as exc:
            if PRUNED_MARK in str(exc):
                # §9 K3: a new row for a pruned id (a Dispatch, or a Cancel's tombstone).
                # Typed but NOT definite: the turn may well have run here once.
                return self._chained(pruned_refusal(operation_id), exc)
            return self._chained(self._write_error(f"write failed: {exc}"), exc)
        except (sqlite3.Error, LaunchBelowFloorError) as exc:
            return self._chained(self._write_error(f"write failed: {exc}"), exc)
        except Exception as exc:  # IllegalRowEvent, or a bug: the caller gets it as it is
            return exc
        meta.last = sequence
        row = rows_sql.to_row(params)  # exactly what a read from SQL returns
        batch.written[operation_id] = row
        return row

    def _all_failed(
        self, items: Sequence[tuple[str, RowEvent]], why: str, cause: BaseException
    ) -> list[Outcome]:
        return [self._chained(self._write_error(why), cause) for _ in items]

    def _copy(self, error: Exception) -> Exception:
        """The same failure for another write of the batch (its own object: each
        caller raises its own, with its own traceback)."""
        try:
            copy = type(error)(*error.args)
        except Exception:
            copy = self._write_error(str(error))
        return self._chained(copy, error.__cause__ or error)

    @staticmethod
    def _chained(error: Exception, cause: BaseException) -> Exception:
        error.__cause__ = cause
        return error

    def _rollback(self) -> None:
        if not self._db.in_transaction:
            return  # SQLite already rolled back (e.g. after an I/O error)
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error:
            # The next BEGIN fails too, so every write fails closed.
            log.exception("store %s: rollback failed", self._path)
