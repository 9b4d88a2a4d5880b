"""The runner's dedupe store on a SQLite file (R3, R9, §6).

Synchronous on purpose: the service runs every call on one dedicated thread,
so the event loop never waits on an fsync and SQLite sees one writer.

Every write is one ``BEGIN IMMEDIATE`` transaction that (1) checks that this
incarnation still owns the store (§6 fencing: opening a store makes the
opener its owner, so a surviving older process can write nothing), (2) loads
the row, (3) asks the pure core for the new row (an illegal change raises and
nothing is written), (4) stamps the next durable change sequence, (5) commits.

The per-turn paths (``write``, ``get``, ``get_many``, ``changes_after``) run on
one long-lived raw ``sqlite3`` connection with fixed SQL text (rows_sql.py)
and answer reads from an in-memory mirror when they can (mirror.py); opening,
ownership, the floor and executor records keep SQLAlchemy (issue 10).

Error tree::

    StoreError
    ├── StoreLockedError      another live process holds the store (refused at open)
    ├── StoreSchemaError      schema revision unknown to this code (refused at open)
    ├── StoreReadError        a read failed; nothing was decided
    └── StoreWriteError       a write failed; nothing was written
        └── StoreFencedError  this incarnation no longer owns the store
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa

from runner_svc.core.model import OperationRow
from runner_svc.core.transitions import RowEvent
from runner_svc.core.witness import SEALED_FLOOR, StoreOpening
from runner_svc.storage import migrate, rows_sql
from runner_svc.storage.connections import (
    BUSY_TIMEOUT_MS,
    READ_OPTION,
    connect_raw,
    make_engine,
    set_pragmas,
)
from runner_svc.storage.migrate import StoreSchemaError
from runner_svc.storage.mirror import StoreMirror
from runner_svc.storage.store_errors import (
    StoreError,
    StoreFencedError,
    StoreLockedError,
    StoreReadError,
    StoreWriteError,
)
from runner_svc.storage.tables import store_meta
from runner_svc.storage.witness_sql import (
    checked_store_id,
    raise_floor,
    record_opening,
)
from runner_svc.storage.write_batch import BatchWriter, Outcome
from turnwire.ids import new_store_id

if TYPE_CHECKING:
    from runner_svc.storage.executor_records import ExecutorRecords

log = logging.getLogger("runner_svc.store")

_T = TypeVar("_T")

__all__ = [
    "BUSY_TIMEOUT_MS",
    "SqliteRunnerStore",
    "StoreError",
    "StoreFencedError",
    "StoreLockedError",
    "StoreReadError",
    "StoreSchemaError",
    "StoreWriteError",
    "connect_raw",
    "lock_store",
    "make_engine",
    "set_pragmas",
]


def lock_store(path: Path) -> IO[str]:
    """Take the store's exclusive OS lock for the life of the process, or refuse."""
    lock_path = path.with_name(path.name + ".lock")
    handle = lock_path.open("a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise StoreLockedError(
            f"runner store {path} is in use by another runner process (pid {holder}); "
            "one live process per store: stop it first"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def _file_identity(path: Path) -> str:
    stat = os.stat(path)
    return f"{stat.st_dev}:{stat.st_ino}"


class SqliteRunnerStore:
    """The dedupe store of one runner incarnation on one SQLite file."""

    durable = True

    def __init__(
        self,
        path: Path,
        engine: sa.Engine,
        connection: sqlite3.Connection,
        lock: IO[str] | None,
        incarnation_id: str,
        store_id: str,
        openings: tuple[StoreOpening, ...] = (),
        *,
        mirror: StoreMirror,
    ) -> None:
        self.path = path
        self.incarnation_id = incarnation_id
        self.store_id = store_id
        # The store's most recent openings, newest first (§6 witness); fixed
        # for this incarnation's life.
        self.openings = openings
        self._engine = engine
        self._reader = engine.execution_options(**{READ_OPTION: True})
        self._db = connection
        # Held for every use of ``_db`` and every mirror update that goes with
        # it, so a row read from SQL can never be stored over a newer write.
        self._db_lock = threading.Lock()
        self._lock = lock
        self.mirror = mirror
        # Told every committed row, in commit order, on the writing thread
        # (AsyncRunnerStore pushes it to watchers); it must not raise or block.
        self.on_commit: Callable[[OperationRow], None] | None = None
        self._batches = BatchWriter(
            connection,
            path,
            self._check_owner,
            lambda why: StoreWriteError(f"runner store {path}: {why}"),
        )

    @classmethod
    def open(
        cls,
        path: Path,
        incarnation_id: str,
        *,
        acquire_lock: bool = True,
        migrate_schema: bool = True,
    ) -> SqliteRunnerStore:
        """Lock, check/upgrade the schema, take ownership. ``acquire_lock=False`` is for
        tests of the fencing defence only (it is what a lock failure would allow)."""
        path = Path(path)
        migrate.script_location()  # an incomplete install fails here, before any file is made
        lock = lock_store(path) if acquire_lock else None
        engine = make_engine(path)
        connection: sqlite3.Connection | None = None
        try:
            with engine.connect() as conn:
                revision = migrate.current_revision(conn)
                migrate.check_known(revision, str(path))
                if revision != migrate.head_revision():
                    if not migrate_schema:
                        raise StoreSchemaError(
                            f"runner store {path} is at revision {revision!r}, not "
                            f"{migrate.head_revision()!r}: run `python -m runner_svc migrate`"
                        )
                    migrate.upgrade_to_head(conn)
                    conn.commit()
            store_id, chain = cls._take_ownership(engine, path, incarnation_id)
            connection = connect_raw(path)
            # Read after taking ownership: from here on only this incarnation
            # may move it (every other writer is fenced out), so the mirror
            # starts exactly at the store's last change.
            last_sequence = int(connection.execute(rows_sql.SELECT_LAST_SEQUENCE).fetchone()[0])
            newest_row = int(connection.execute(rows_sql.SELECT_NEWEST_ROW).fetchone()[0])
        except BaseException as exc:
            if connection is not None:
                connection.close()
            engine.dispose()
            if lock is not None:
                lock.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot open runner store {path}: {exc}") from exc
            raise
        log.info("store %s opened by incarnation %s (store_id %s)", path, incarnation_id, store_id)
        return cls(
            path,
            engine,
            connection,
            lock,
            incarnation_id,
            store_id,
            chain,
            mirror=StoreMirror(last_sequence, newest_row=newest_row),
        )

    @staticmethod
    def _take_ownership(
        engine: sa.Engine, path: Path, incarnation_id: str
    ) -> tuple[str, tuple[StoreOpening, ...]]:
        identity = _file_identity(path)
        now = time.time()
        with engine.begin() as conn:
            meta = conn.execute(sa.select(store_meta)).mappings().first()
            if meta is None:
                store_id = new_store_id()
                conn.execute(
                    store_meta.insert().values(
                        id=1,
                        store_id=store_id,
                        file_identity=identity,
                        owner_incarnation_id=incarnation_id,
                        owner_since=now,
                        last_sequence=0,
                        admission_floor=0,
                        row_count=0,
                        row_digest=0,
                    )
                )
                predecessor, predecessor_floor = "", 0
            else:
                store_id, (row_count, row_digest) = checked_store_id(conn, meta, path, identity)
                predecessor = str(meta["owner_incarnation_id"])
                predecessor_floor = int(meta["admission_floor"])
                conn.execute(
                    store_meta.update().values(
                        store_id=store_id,
                        # The rows as they are: a new store_id starts from them.
                        row_count=row_count,
                        row_digest=row_digest,
                        file_identity=identity,
                        owner_incarnation_id=incarnation_id,
                        owner_since=now,
                        # The new owner's own floor (the old one is kept below),
                        # from the retention floor: nothing retention forgot may
                        # be admitted again, by any owner (PROTOCOL.md §9 K4).
                        admission_floor=int(meta["retention_floor"]),
                    )
                )
            # §6 witness: the floor the predecessor left is what this opening
            # can vouch for (runner_svc.core.witness).
            chain = record_opening(conn, incarnation_id, predecessor, predecessor_floor, now)
            return store_id, chain

    # --- reads: memory first, then the store's connection ------------------

    def get(self, operation_id: str) -> OperationRow | None:
        row = self.mirror.row(operation_id)
        if row is not None:
            return row
        return self.get_many([operation_id]).get(operation_id)

    def get_many(self, operation_ids: Iterable[str]) -> dict[str, OperationRow]:
        ids = list(dict.fromkeys(operation_ids))
        found = self.mirror.rows(ids)
        if found is not None:
            return found
        with self._db_lock:
            # Looked up again under the connection's lock: no write lands
            # between these look-ups and the SQL below, so the answer is one
            # moment's, as one SELECT's was.
            found, missing = {}, []
            for operation_id in ids:
                row = self.mirror.row(operation_id)
                if row is None:
                    missing.append(operation_id)
                else:
                    found[operation_id] = row
            fetched = self._select(rows_sql.SELECT_ROW, [(op,) for op in missing])
            self.mirror.read(fetched)
        found.update((row.operation_id, row) for row in fetched)
        return found

    def changes_after(self, sequence: int, limit: int = 500) -> list[OperationRow]:
        """Rows whose last change is after ``sequence``, oldest change first."""
        recent = self.mirror.changes_after(sequence, limit)
        if recent is not None:
            return recent
        with self._db_lock:
            # Older than the mirror's window (a watcher far behind, or a cursor
            # from before this incarnation): SQL, and not kept (a catch-up
            # would only push the rows in use out of the mirror).
            return self._select(rows_sql.SELECT_CHANGES, [(sequence, limit)])

    def _select(self, sql: str, each: list[tuple[Any, ...]]) -> list[OperationRow]:
        """Rows for ``sql`` run once per parameter tuple (the connection's lock held)."""
        try:
            return [
                rows_sql.to_row(values)
                for params in each
                for values in self._db.execute(sql, params).fetchall()
            ]
        except sqlite3.Error as exc:
            raise StoreReadError(f"cannot read runner store {self.path}: {exc}") from exc

    def last_sequence(self) -> int:
        try:
            with self._reader.begin() as conn:
                value = conn.execute(sa.select(store_meta.c.last_sequence)).scalar_one()
        except sa.exc.SQLAlchemyError as exc:
            raise StoreReadError(f"cannot read runner store {self.path}: {exc}") from exc
        return int(value)

    # --- the one write path -----------------------------------------------

    def _owned_meta(self, conn: sa.Connection) -> sa.RowMapping:
        """The meta row, once §6 fencing confirms this incarnation still owns the store."""
        meta = conn.execute(sa.select(store_meta)).mappings().one()
        self._check_owner(str(meta["owner_incarnation_id"]))
        return meta

    def _check_owner(self, owner: str) -> None:
        if owner != self.incarnation_id:
            # Another process writes now: only SQL knows what it wrote.
            self.mirror.disable()
            raise StoreFencedError(
                f"runner store {self.path} is owned by incarnation "
                f"{owner}; {self.incarnation_id} may not write"
            )

    def write(self, operation_id: str, change: RowEvent) -> OperationRow:
        """Apply one legal change durably, fenced by ownership; returns the new row."""
        (outcome,) = self.write_batch([(operation_id, change)])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def write_batch(self, items: Sequence[tuple[str, RowEvent]]) -> list[Outcome]:
        """Apply several changes in one transaction (group commit, write_batch.py):
        one outcome each, in order, a row or the exception that write raises."""
        with self._db_lock:
            outcomes = self._batches.write(items, self.mirror)
            notify = self.on_commit
            if notify is not None:
                for outcome in outcomes:
                    if isinstance(outcome, OperationRow):
                        try:
                            notify(outcome)
                        except Exception:  # the write stands; a watcher catches up
                            log.exception("store %s: commit listener failed", self.path)
        return outcomes

    def maintain(self, work: Callable[[sqlite3.Connection], tuple[_T, Collection[str]]]) -> _T:
        """``work`` in one write transaction on the store's connection, for changes off
        the row path (retention, storage/retention.py): fenced like every write (§6),
        all or nothing. ``work`` returns its value and the ids of the rows it deleted,
        which leave the mirror once the COMMIT is durable."""
        with self._db_lock:
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreWriteError(f"runner store {self.path}: {exc}") from exc
            try:
                meta = db.execute(rows_sql.SELECT_META).fetchone()
                if meta is None:
                    raise StoreWriteError(f"runner store {self.path}: its meta row is missing")
                self._check_owner(str(meta[0]))
                value, removed = work(db)
                db.execute("COMMIT")
            except BaseException as exc:
                if db.in_transaction:
                    try:
                        db.execute("ROLLBACK")
                    except sqlite3.Error:
                        log.exception("store %s: rollback failed", self.path)
                # A failed COMMIT may have landed: memory asks SQL until the next write.
                self.mirror.lose_track()
                if isinstance(exc, sqlite3.Error):
                    raise StoreWriteError(f"runner store {self.path}: {exc}") from exc
                raise
            self.mirror.forget(removed)
            return value

    def pruned_among(self, operation_ids: Iterable[str]) -> set[str]:
        """The ids whose rows retention deleted, keeping their keys (§9 K3)."""
        with self._db_lock:
            try:
                return {
                    operation_id
                    for operation_id in operation_ids
                    if self._db.execute(rows_sql.SELECT_PRUNED, (operation_id,)).fetchone()
                }
            except sqlite3.Error as exc:
                raise StoreReadError(f"cannot read runner store {self.path}: {exc}") from exc

    def advance_floor(self, target: int) -> int:
        """Raise this owner's admission floor towards ``target`` (never past a row
        that may still launch); returns the floor now in force (§6 witness)."""
        try:
            with self._engine.begin() as conn:
                meta = self._owned_meta(conn)
                floor = raise_floor(conn, self.incarnation_id, int(meta["admission_floor"]), target)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreWriteError(f"runner store {self.path}: floor write failed: {exc}") from exc
        return floor

    def seal(self) -> bool:
        """At a clean close: a floor no stamp reaches, unless a row may still launch."""
        return self.advance_floor(SEALED_FLOOR) == SEALED_FLOOR

    def admission_floor(self) -> int:
        try:
            with self._reader.begin() as conn:
                value = conn.execute(sa.select(store_meta.c.admission_floor)).scalar_one()
        except sa.exc.SQLAlchemyError as exc:
            raise StoreReadError(f"cannot read runner store {self.path}: {exc}") from exc
        return int(value)

    def executor_records(self) -> ExecutorRecords:
        """Executor process groups recorded at launch (R10; storage/executor_records.py)."""
        from runner_svc.storage.executor_records import ExecutorRecords

        return ExecutorRecords(self._engine, self.path, self.incarnation_id)

    def close(self) -> None:
        with self._db_lock:
            self.mirror.disable()  # a closed store answers nothing from memory
            self._db.close()
        self._engine.dispose()
        if self._lock is not None:
            self._lock.close()  # closing the descriptor releases the flock
            self._lock = None
        log.info("store %s closed by incarnation %s", self.path, self.incarnation_id)
