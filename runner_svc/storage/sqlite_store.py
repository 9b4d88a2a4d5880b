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
from typing import IO, Any

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
from runner_svc.storage import migrate
from runner_svc.storage.migrate import StoreSchemaError
from runner_svc.storage.tables import operations, store_meta
from turnwire.ids import new_store_id

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
    ) -> None:
        self.path = path
        self.incarnation_id = incarnation_id
        self.store_id = store_id
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
            store_id = cls._take_ownership(engine, path, incarnation_id)
        except BaseException:
            engine.dispose()
            if lock is not None:
                lock.close()
            raise
        log.info("store %s opened by incarnation %s (store_id %s)", path, incarnation_id, store_id)
        return cls(path, engine, lock, incarnation_id, store_id)

    @staticmethod
    def _take_ownership(engine: sa.Engine, path: Path, incarnation_id: str) -> str:
        identity = _file_identity(path)
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
                        owner_since=time.time(),
                        last_sequence=0,
                    )
                )
                return store_id
            store_id = str(meta["store_id"])
            if meta["file_identity"] != identity:
                # A copied or restored file: its absence proofs are void (§6).
                old, store_id = store_id, new_store_id()
                log.warning("store %s is a copy of %s: new store_id %s", path, old, store_id)
            conn.execute(
                store_meta.update().values(
                    store_id=store_id,
                    file_identity=identity,
                    owner_incarnation_id=incarnation_id,
                    owner_since=time.time(),
                )
            )
            return store_id

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

    def write(self, operation_id: str, change: RowEvent) -> OperationRow:
        """Apply one legal change durably, fenced by ownership; returns the new row."""
        try:
            with self._engine.begin() as conn:
                meta = conn.execute(sa.select(store_meta)).mappings().one()
                if meta["owner_incarnation_id"] != self.incarnation_id:
                    raise StoreFencedError(
                        f"runner store {self.path} is owned by incarnation "
                        f"{meta['owner_incarnation_id']}; {self.incarnation_id} may not write"
                    )
                found = (
                    conn.execute(
                        sa.select(operations).where(operations.c.operation_id == operation_id)
                    )
                    .mappings()
                    .first()
                )
                current = _to_row(found) if found is not None else None
                new = apply(current, change, operation_id)
                sequence = int(meta["last_sequence"]) + 1
                values = {**_to_values(new), "sequence": sequence}
                if current is None:
                    conn.execute(operations.insert().values(**values))
                else:
                    conn.execute(
                        operations.update()
                        .where(operations.c.operation_id == operation_id)
                        .values(**values)
                    )
                conn.execute(store_meta.update().values(last_sequence=sequence))
        except sa.exc.SQLAlchemyError as exc:
            raise StoreWriteError(f"runner store {self.path}: write failed: {exc}") from exc
        return _to_row({**values})

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
    )
