"""The Journal on SQLite and PostgreSQL (SQLAlchemy Core, sync, off the event loop).

Every method runs one short transaction in a worker thread (one thread for
SQLite, a small pool for PostgreSQL, see ``backends``), so the event loop
never blocks on the database. The write rules are ``rules``; this module
adds the transaction, the compare-and-set and the unique keys.

Fail closed: any database error becomes ``JournalUnavailable`` and its
transaction is rolled back, so nothing is half-written. A caller whose await
is cancelled mid-write cannot know whether the write committed; it reloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from coordinator_svc.core.model import (
    TERMINAL_STATES,
    AttemptRecord,
    Change,
    EventRecord,
    OperationRecord,
    OpState,
)
from coordinator_svc.ports import (
    IdempotencyKeyReused,
    InvalidWrite,
    JournalNotMigrated,
    JournalUnavailable,
    LeaseLost,
    PageCursor,
    StaleVersion,
)
from coordinator_svc.storage import rules, schema
from coordinator_svc.storage.backends import (
    READ_ONLY,
    Backend,
    SqliteBackend,
    backend_for,
)
from coordinator_svc.storage.rows import from_row, to_row
from coordinator_svc.storage.tables import attempts, events, operations

T = TypeVar("T")

_TERMINAL_NAMES = sorted(state.value for state in TERMINAL_STATES)
_OP = operations.c


def _mutable_columns(record: OperationRecord) -> dict[str, Any]:
    """The row minus what acceptance fixed (rules checked it is unchanged):
    a commit never resends the envelope, which may be large."""
    row = to_row(record)
    return {name: value for name, value in row.items() if name not in rules.IMMUTABLE_FIELDS}


def _op_order(query: sa.Select[Any]) -> sa.Select[Any]:
    return query.order_by(_OP.created_at, _OP.operation_id)


class SqlJournal:
    """The Journal port on a SQL database. Make one with ``open_journal``."""

    def __init__(self, engine: Engine, backend: Backend) -> None:
        self._engine = engine
        self._backend = backend
        self._executor = ThreadPoolExecutor(
            max_workers=backend.worker_threads, thread_name_prefix=f"journal-{backend.name}"
        )
        self._commits = 0
        self._closed = False

    @property
    def commits(self) -> int:
        return self._commits

    @property
    def backend_name(self) -> str:
        return self._backend.name

    # -- plumbing -------------------------------------------------------------

    async def _call(self, work: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise JournalUnavailable("the journal is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(work, *args))

    async def _write(self, work: Callable[..., tuple[T, bool]], *args: Any) -> T:
        """Run a write; count it if it committed a change."""
        value, wrote = await self._call(work, *args)
        if wrote:
            self._commits += 1
        return value

    @contextlib.contextmanager
    def _transaction(self, *, read_only: bool = False) -> Iterator[sa.Connection]:
        """One transaction; commits on success, rolls back on any exception.

        Database errors surface as JournalUnavailable; our own errors
        (StaleVersion, InvalidWrite, ...) pass through after the rollback.
        """
        try:
            with self._engine.connect() as connection:
                connection.execution_options(**{READ_ONLY: read_only})
                with connection.begin():
                    yield connection
        except sa.exc.SQLAlchemyError as error:
            raise JournalUnavailable(f"journal database error: {error}") from error

    def _select_ops(self, query: sa.Select[Any]) -> list[OperationRecord]:
        with self._transaction(read_only=True) as connection:
            rows = connection.execute(query).mappings().all()
        return [from_row(OperationRecord, row) for row in rows]

    # -- submit (C1) ----------------------------------------------------------

    async def submit(
        self, operation: OperationRecord, first_event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        stored, event = rules.prepare_submit(operation, first_event)
        return await self._write(self._submit, stored, event)

    def _submit(
        self, stored: OperationRecord, event: EventRecord
    ) -> tuple[tuple[OperationRecord, bool], bool]:
        with self._transaction() as connection:
            # RETURNING says whether this insert made the row; rowcount after
            # ON CONFLICT DO NOTHING is not reliable across drivers.
            insert = (
                self._backend.insert(operations)
                .values(to_row(stored))
                .on_conflict_do_nothing()
                .returning(_OP.operation_id)
            )
            if connection.execute(insert).first() is not None:
                connection.execute(sa.insert(events).values(to_row(event)))
                return (stored, False), True
            by_key = sa.select(operations).where(
                _OP.principal == stored.principal,
                _OP.idempotency_key_digest == stored.idempotency_key_digest,
            )
            row = connection.execute(by_key).mappings().first()
        if row is None:
            raise InvalidWrite(f"operation id {stored.operation_id} already exists")
        existing = from_row(OperationRecord, row)
        if existing.request_digest != stored.request_digest:
            raise IdempotencyKeyReused(existing.operation_id)
        return (existing, True), False

    # -- reads ----------------------------------------------------------------

    async def get(self, operation_id: str) -> OperationRecord | None:
        found = await self._call(
            self._select_ops, sa.select(operations).where(_OP.operation_id == operation_id)
        )
        return found[0] if found else None

    async def get_for_principal(self, principal: str, operation_id: str) -> OperationRecord | None:
        query = sa.select(operations).where(
            _OP.operation_id == operation_id, _OP.principal == principal
        )
        found = await self._call(self._select_ops, query)
        return found[0] if found else None

    async def by_idempotency_key(
        self, principal: str, idempotency_key_digest: str
    ) -> OperationRecord | None:
        query = sa.select(operations).where(
            _OP.principal == principal, _OP.idempotency_key_digest == idempotency_key_digest
        )
        found = await self._call(self._select_ops, query)
        return found[0] if found else None

    async def list_for_principal(
        self,
        principal: str,
        states: Sequence[OpState],
        limit: int,
        after: PageCursor | None,
    ) -> list[OperationRecord]:
        query = sa.select(operations).where(_OP.principal == principal)
        if states:
            query = query.where(_OP.state.in_([state.value for state in states]))
        if after is not None:
            created_at = rules.as_utc(after.created_at, "cursor")
            query = query.where(
                sa.or_(
                    _OP.created_at > created_at,
                    sa.and_(_OP.created_at == created_at, _OP.operation_id > after.operation_id),
                )
            )
        return await self._call(self._select_ops, _op_order(query).limit(max(limit, 0)))

    async def due(self, now: datetime, limit: int, *, queued: bool = True) -> list[OperationRecord]:
        now = rules.as_utc(now, "due time")
        waiting = _TERMINAL_NAMES if queued else (*_TERMINAL_NAMES, OpState.QUEUED.value)
        ready = sa.and_(
            _OP.state.not_in(waiting),
            sa.or_(_OP.next_action_at.is_(None), _OP.next_action_at <= now),
        )
        unreleased = sa.and_(_OP.state.in_(_TERMINAL_NAMES), _OP.released.is_(False))
        query = sa.select(operations).where(sa.or_(ready, unreleased))
        return await self._call(self._select_ops, _op_order(query).limit(max(limit, 0)))

    async def in_state(self, state: OpState, limit: int) -> list[OperationRecord]:
        query = sa.select(operations).where(_OP.state == state.value)
        return await self._call(self._select_ops, _op_order(query).limit(max(limit, 0)))

    async def events(self, operation_id: str, after_sequence: int, limit: int) -> list[EventRecord]:
        query = (
            sa.select(events)
            .where(events.c.operation_id == operation_id, events.c.sequence > after_sequence)
            .order_by(events.c.sequence)
            .limit(max(limit, 0))
        )
        return await self._call(self._select_rows, EventRecord, query)

    async def attempts(self, operation_id: str) -> list[AttemptRecord]:
        query = (
            sa.select(attempts)
            .where(attempts.c.operation_id == operation_id)
            .order_by(attempts.c.number)
        )
        return await self._call(self._select_rows, AttemptRecord, query)

    def _select_rows(self, record_type: type[Any], query: sa.Select[Any]) -> list[Any]:
        with self._transaction(read_only=True) as connection:
            rows = connection.execute(query).mappings().all()
        return [from_row(record_type, row) for row in rows]

    # -- commit (C4, C13, §5) -------------------------------------------------

    async def commit(self, change: Change) -> OperationRecord:
        stored, event, attempt = rules.prepare_change(change)
        return await self._write(self._commit, change, stored, event, attempt)

    def _commit(
        self,
        change: Change,
        stored: OperationRecord,
        event: EventRecord | None,
        attempt: AttemptRecord | None,
    ) -> tuple[OperationRecord, bool]:
        before = change.before
        with self._transaction() as connection:
            compare_and_set = (
                sa.update(operations)
                .where(
                    _OP.operation_id == before.operation_id,
                    _OP.version == before.version,
                    _OP.fencing_token == before.fencing_token,
                    # Redundant with version unless `before` was not read from
                    # here; then the edge check above judged the wrong state.
                    _OP.state == before.state.value,
                )
                .values(_mutable_columns(stored))
            )
            if connection.execute(compare_and_set).rowcount != 1:
                self._raise_conflict(connection, before)
            if event is not None:
                connection.execute(sa.insert(events).values(to_row(event)))
            if attempt is not None:
                connection.execute(sa.insert(attempts).values(to_row(attempt)))
            for update in change.attempt_updates:
                closed = connection.execute(
                    sa.update(attempts)
                    .where(
                        attempts.c.operation_id == before.operation_id,
                        attempts.c.number == update.number,
                    )
                    .values(outcome=update.outcome.value, detail=update.detail)
                )
                if closed.rowcount != 1:
                    raise InvalidWrite(f"{before.operation_id}: no attempt {update.number}")
        return stored, True

    @staticmethod
    def _raise_conflict(connection: sa.Connection, before: OperationRecord) -> None:
        current = connection.execute(
            sa.select(_OP.version, _OP.fencing_token).where(_OP.operation_id == before.operation_id)
        ).first()
        if current is None:
            raise InvalidWrite(f"operation {before.operation_id} does not exist")
        if current.fencing_token != before.fencing_token:
            raise LeaseLost(f"{before.operation_id}: fencing token is now {current.fencing_token}")
        raise StaleVersion(f"{before.operation_id}: version is now {current.version}")

    # -- claim (§5) -----------------------------------------------------------

    async def claim(
        self, operation_id: str, owner: str, now: datetime, ttl_seconds: float
    ) -> OperationRecord | None:
        now = rules.as_utc(now, "claim time")
        return await self._write(self._claim, operation_id, owner, now, ttl_seconds)

    def _claim(
        self, operation_id: str, owner: str, now: datetime, ttl_seconds: float
    ) -> tuple[OperationRecord | None, bool]:
        with self._transaction() as connection:
            query = self._backend.lock_for_claim(
                sa.select(operations).where(_OP.operation_id == operation_id)
            )
            row = connection.execute(query).mappings().first()
            if row is None:
                return None, False
            current = from_row(OperationRecord, row)
            updated = rules.claimed(current, owner, now, ttl_seconds)
            if updated is None:
                return None, False
            taken = connection.execute(
                sa.update(operations)
                .where(_OP.operation_id == operation_id, _OP.version == current.version)
                .values(
                    lease_owner=updated.lease_owner,
                    lease_expires_at=updated.lease_expires_at,
                    fencing_token=updated.fencing_token,
                    version=updated.version,
                )
            )
            if taken.rowcount != 1:  # the lock above makes this unreachable; never assume
                return None, False
        return updated, True

    # -- lifecycle ------------------------------------------------------------

    async def close(self) -> None:
        """Refuse new calls, let the ones in flight finish, then close the connections."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._executor.shutdown, True)
        await asyncio.to_thread(self._engine.dispose)


def open_journal(url: str, *, busy_timeout: float = 5.0) -> SqlJournal:
    """Open the journal at ``url`` (sync; call it before or at service start).

    ``sqlite:///PATH`` or ``postgresql+psycopg://USER@HOST:PORT/DB``. Never
    changes the schema: a journal without one, or with an older one, raises
    JournalNotMigrated (run ``python -m coordinator_svc migrate``); one
    written by newer code raises SchemaTooNew; an unreachable database
    raises JournalUnavailable. ``busy_timeout`` (seconds) bounds how long a
    write waits for a lock another connection holds (SQLite busy_timeout,
    PostgreSQL lock_timeout) and how long connecting may take (PostgreSQL).
    """
    parsed = schema.journal_url(url)
    backend = backend_for(parsed)
    if isinstance(backend, SqliteBackend):
        path = SqliteBackend.database_file(parsed)
        if path is not None and not path.exists():
            raise JournalNotMigrated(
                f"no journal file at {path}; run `{schema.MIGRATE_COMMAND}` first"
            )
    engine = backend.make_engine(parsed, busy_timeout)
    try:
        with engine.connect() as connection:
            connection.execution_options(**{READ_ONLY: True})
            with connection.begin():
                schema.check_revision(connection)
    except sa.exc.SQLAlchemyError as error:
        engine.dispose()
        raise JournalUnavailable(f"cannot open the journal: {error}") from error
    except BaseException:
        engine.dispose()
        raise
    return SqlJournal(engine, backend)
