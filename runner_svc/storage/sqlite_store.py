"""The runner's dedupe store on a SQLite file (R3, R9, §6).

Synchronous on purpose: the service runs every call on one dedicated thread,
so the event loop never waits on an fsync and SQLite sees one writer.

Every write is one ``BEGIN IMMEDIATE`` transaction that (1) checks that this
incarnation still owns the store (§6 fencing: opening a store makes the
opener its owner, so a surviving older process can write nothing), (2) loads
the row, (3) asks the pure core for the new row (an illegal change raises and
nothing is written), (4) stamps the next durable change sequence, (5) commits.

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
import json
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import event as sa_event

from runner_svc.core.model import (
    Execution,
    OperationRow,
    RowState,
    SlotKind,
    StopReason,
    TurnFailure,
    TurnOutput,
)
from runner_svc.core.transitions import RowEvent, apply
from runner_svc.core.witness import SEALED_FLOOR, StoreOpening, add_to_digest
from runner_svc.storage import migrate
from runner_svc.storage.migrate import StoreSchemaError
from runner_svc.storage.tables import operations, store_meta
from runner_svc.storage.witness_sql import (
    LaunchBelowFloorError,
    check_floor,
    checked_store_id,
    raise_floor,
    record_opening,
)
from turnwire.ids import new_store_id

if TYPE_CHECKING:
    from runner_svc.storage.executor_records import ExecutorRecords

log = logging.getLogger("runner_svc.store")

# How long a connection waits for SQLite's own lock before failing (ms). Only
# this process writes (the OS lock), so a wait means a checkpoint or a reader.
BUSY_TIMEOUT_MS = 5000
_READ_OPTION = "turnwire_read_only"

__all__ = [
    "SqliteRunnerStore",
    "StoreError",
    "StoreFencedError",
    "StoreLockedError",
    "StoreReadError",
    "StoreSchemaError",
    "StoreWriteError",
]


class StoreError(RuntimeError):
    """The runner store failed; callers fail closed."""


class StoreLockedError(StoreError):
    """Another live process holds this store's lock (one live process per store, §6)."""


class StoreReadError(StoreError):
    """A read failed; nothing was decided from it."""


class StoreWriteError(StoreError):
    """A write failed and was rolled back; nothing changed."""


class StoreFencedError(StoreWriteError):
    """A newer incarnation opened the store; this one may write nothing (§6)."""


def make_engine(path: Path) -> sa.Engine:
    """An engine whose connections carry the pragmas the dedupe store needs."""
    engine = sa.create_engine(
        f"sqlite:///{path}",
        # The service thread and test threads share the engine; SQLite
        # connections are still used by one thread at a time.
        connect_args={"check_same_thread": False},
    )

    @sa_event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event below issue BEGIN itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # WAL: readers (status, watch) never block the writer and vice versa.
        cursor.execute("PRAGMA journal_mode=WAL")
        # FULL: fsync the WAL at every commit; "accepted" must survive power loss (R3).
        cursor.execute("PRAGMA synchronous=FULL")
        # Wait for a checkpoint or a reader instead of failing at once.
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        # Constraints are part of the contract; SQLite ignores them unless asked.
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @sa_event.listens_for(engine, "begin")
    def _begin(connection: sa.Connection) -> None:
        # IMMEDIATE takes the write lock up front: a read-then-write
        # transaction can never be overtaken between its read and its write.
        mode = "DEFERRED" if connection.get_execution_options().get(_READ_OPTION) else "IMMEDIATE"
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine


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
        lock: IO[str] | None,
        incarnation_id: str,
        store_id: str,
        openings: tuple[StoreOpening, ...] = (),
    ) -> None:
        self.path = path
        self.incarnation_id = incarnation_id
        self.store_id = store_id
        # The store's most recent openings, newest first (§6 witness); fixed
        # for this incarnation's life.
        self.openings = openings
        self._engine = engine
        self._reader = engine.execution_options(**{_READ_OPTION: True})
        self._lock = lock

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
        lock = lock_store(path) if acquire_lock else None
        engine = make_engine(path)
        try:
            with engine.connect() as connection:
                revision = migrate.current_revision(connection)
                migrate.check_known(revision, str(path))
                if revision != migrate.head_revision():
                    if not migrate_schema:
                        raise StoreSchemaError(
                            f"runner store {path} is at revision {revision!r}, not "
                            f"{migrate.head_revision()!r}: run `python -m runner_svc migrate`"
                        )
                    migrate.upgrade_to_head(connection)
                    connection.commit()
            store_id, chain = cls._take_ownership(engine, path, incarnation_id)
        except BaseException:
            engine.dispose()
            if lock is not None:
                lock.close()
            raise
        log.info("store %s opened by incarnation %s (store_id %s)", path, incarnation_id, store_id)
        return cls(path, engine, lock, incarnation_id, store_id, chain)

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
                        # The new owner's own floor; the old one is kept below.
                        admission_floor=0,
                    )
                )
            # §6 witness: the floor the predecessor left is what this opening
            # can vouch for (runner_svc.core.witness).
            chain = record_opening(conn, incarnation_id, predecessor, predecessor_floor, now)
            return store_id, chain

    # --- reads -------------------------------------------------------------

    def get(self, operation_id: str) -> OperationRow | None:
        return self.get_many([operation_id]).get(operation_id)

    def get_many(self, operation_ids: Iterable[str]) -> dict[str, OperationRow]:
        ids = list(dict.fromkeys(operation_ids))
        query = sa.select(operations).where(operations.c.operation_id.in_(ids))
        rows = self._read(query)
        return {row.operation_id: row for row in rows}

    def changes_after(self, sequence: int, limit: int = 500) -> list[OperationRow]:
        """Rows whose last change is after ``sequence``, oldest change first."""
        query = (
            sa.select(operations)
            .where(operations.c.sequence > sequence)
            .order_by(operations.c.sequence)
            .limit(limit)
        )
        return self._read(query)

    def last_sequence(self) -> int:
        try:
            with self._reader.begin() as conn:
                value = conn.execute(sa.select(store_meta.c.last_sequence)).scalar_one()
        except sa.exc.SQLAlchemyError as exc:
            raise StoreReadError(f"cannot read runner store {self.path}: {exc}") from exc
        return int(value)

    def _read(self, query: sa.Select[Any]) -> list[OperationRow]:
        try:
            with self._reader.begin() as conn:
                return [_to_row(m) for m in conn.execute(query).mappings()]
        except sa.exc.SQLAlchemyError as exc:
            raise StoreReadError(f"cannot read runner store {self.path}: {exc}") from exc

    # --- the one write path -----------------------------------------------

    def _owned_meta(self, conn: sa.Connection) -> sa.RowMapping:
        """The meta row, once §6 fencing confirms this incarnation still owns the store."""
        meta = conn.execute(sa.select(store_meta)).mappings().one()
        if meta["owner_incarnation_id"] != self.incarnation_id:
            raise StoreFencedError(
                f"runner store {self.path} is owned by incarnation "
                f"{meta['owner_incarnation_id']}; {self.incarnation_id} may not write"
            )
        return meta

    def write(self, operation_id: str, change: RowEvent) -> OperationRow:
        """Apply one legal change durably, fenced by ownership; returns the new row."""
        try:
            with self._engine.begin() as conn:
                meta = self._owned_meta(conn)
                found = (
                    conn.execute(
                        sa.select(operations).where(operations.c.operation_id == operation_id)
                    )
                    .mappings()
                    .first()
                )
                current = _to_row(found) if found is not None else None
                check_floor(current, change, int(meta["admission_floor"]), operation_id)
                new = apply(current, change, operation_id)
                sequence = int(meta["last_sequence"]) + 1
                values = {**_to_values(new), "sequence": sequence}
                counters: dict[str, int] = {"last_sequence": sequence}
                if current is None:
                    conn.execute(operations.insert().values(**values))
                    counters["row_count"] = int(meta["row_count"]) + 1
                    counters["row_digest"] = add_to_digest(int(meta["row_digest"]), operation_id)
                else:
                    conn.execute(
                        operations.update()
                        .where(operations.c.operation_id == operation_id)
                        .values(**values)
                    )
                conn.execute(store_meta.update().values(**counters))
        except sa.exc.SQLAlchemyError as exc:
            raise StoreWriteError(f"runner store {self.path}: write failed: {exc}") from exc
        except LaunchBelowFloorError as exc:
            raise StoreWriteError(f"runner store {self.path}: {exc}") from exc
        return _to_row({**values})

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
        self._engine.dispose()
        if self._lock is not None:
            self._lock.close()  # closing the descriptor releases the flock
            self._lock = None
        log.info("store %s closed by incarnation %s", self.path, self.incarnation_id)


def _to_values(row: OperationRow) -> dict[str, Any]:
    result = row.result
    error = row.error
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
    }


def _to_row(values: Any) -> OperationRow:
    result = None
    if values["result_output"] is not None:
        result = TurnOutput(
            output=bytes(values["result_output"]),
            content_type=values["result_content_type"] or "",
            metadata=json.loads(values["result_metadata"] or "{}"),
        )
    error = None
    if values["error_reason"] is not None:
        error = TurnFailure(values["error_reason"], values["error_message"] or "")
    return OperationRow(
        operation_id=values["operation_id"],
        state=RowState(values["state"]),
        execution=Execution(values["execution"]),
        incarnation_id=values["incarnation_id"],
        sequence=int(values["sequence"]),
        fencing_token=int(values["fencing_token"]),
        attempt=int(values["attempt"]),
        kind=SlotKind(values["kind"]) if values["kind"] else None,
        envelope_digest=values["envelope_digest"],
        stop_reason=StopReason(values["stop_reason"]) if values["stop_reason"] else None,
        result=result,
        error=error,
        released=bool(values["released"]),
        accepted_at=values["accepted_at"],
        started_at=values["started_at"],
        settled_at=values["settled_at"],
        dispatch_stamp=int(values["dispatch_stamp"] or 0),
    )
