"""The Journal on SQLite and PostgreSQL: fixed statements on long-lived connections.

Every method runs one short transaction in a worker thread (one thread for
SQLite, a small pool for PostgreSQL, see ``backends``), so the event loop
never blocks on the database. Each worker thread checks one DBAPI connection
out of the engine's pool the first time it needs one and keeps it (the
engine's connect hooks set the pragmas and timeouts) until it breaks or the
journal closes. The statements are ``statements.Statements``: fixed text,
prepared once per connection. The write rules are ``rules``; this module
adds the transaction, the compare-and-set and the unique keys.

Writes that queue together share a transaction (group commit,
``group_commit``), each keeping its own outcome: on SQLite in savepoints; on
PostgreSQL, where a submit or commit is one statement (``single_statement``),
in one pipeline.

Fail closed: any database error becomes ``JournalUnavailable`` and its
transaction is rolled back, so nothing is half-written; a connection that
broke is dropped and the next call takes a fresh one. A caller whose await
is cancelled mid-write cannot know whether the write committed; it reloads.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from coordinator_svc.core.model import (
    AttemptRecord,
    Change,
    EventRecord,
    OperationRecord,
    OpState,
)
from coordinator_svc.ports import (
    IdempotencyKeyReused,
    InvalidWrite,
    JournalUnavailable,
    LeaseLost,
    PageCursor,
    StaleVersion,
)
from coordinator_svc.storage import rules, schema
from coordinator_svc.storage.admin_sql import SqlAdmin
from coordinator_svc.storage.backends import (
    Backend,
)
from coordinator_svc.storage.connections import KeptConnections
from coordinator_svc.storage.group_commit import GroupCommit, Outcome, Work
from coordinator_svc.storage.leases import LeaseStatements, SqlLeases
from coordinator_svc.storage.membership_sql import SqlMembership
from coordinator_svc.storage.single_statement import (
    OneStatement,
    SingleStatements,
    distinct_closes,
    sent_together,
    server_refused,
)
from coordinator_svc.storage.statements import Dialect, Statements

T = TypeVar("T")
Cursor = Any  # a DBAPI cursor (sqlite3 or psycopg)


def _same_failure(error: Exception) -> Exception:
    """The failure of a shared transaction, for another write of it (its own object)."""
    failure = JournalUnavailable(
        str(error) if isinstance(error, JournalUnavailable) else f"journal write failed: {error}"
    )
    failure.__cause__ = error.__cause__ or error
    return failure


def _unavailable(error: BaseException) -> JournalUnavailable:
    failure = JournalUnavailable(f"journal database error: {error}")
    failure.__cause__ = error
    return failure


class _StaleConnection(Exception):
    """A kept connection was found dead before anything was written on it."""


class SqlJournal(SqlLeases, SqlAdmin, SqlMembership):
    """The Journal port on a SQL database. Make one with ``open_journal``."""

    def __init__(
        self, engine: Engine, backend: Backend, *, one_statement_writes: bool = True
    ) -> None:
        self._engine = engine
        self._backend = backend
        self._sql = Statements(Dialect(backend.name))
        self._leases = LeaseStatements(self._sql.dialect, self._sql.select_operations)
        self._connections = KeptConnections(engine, backend)
        self._executor = ThreadPoolExecutor(
            max_workers=backend.worker_threads, thread_name_prefix=f"journal-{backend.name}"
        )
        self._commits = 0
        # Durable write transactions (COMMITs) made: fewer than the writes when
        # writes share one (group commit, pipelines; bench/e2e.py prints both).
        self._write_transactions = 0
        self._tally = threading.Lock()  # worker threads count it
        self._closed = False
        # Writes that queue together share a transaction (group_commit.py). On
        # SQLite's one writer thread, each in its own savepoint. On PostgreSQL a
        # submit or commit is one statement (single_statement.py), and those
        # queued together go in one pipeline; its other writes (claims, rare
        # commits) run alone, side by side on the pool. one_statement_writes=False
        # keeps PostgreSQL's multi-statement form (bench/journal_writes.py
        # compares them).
        sqlite = self._sql.dialect.sqlite
        self._single = SingleStatements(self._sql) if one_statement_writes and not sqlite else None
        self._group: GroupCommit | None = None
        if sqlite:
            self._group = GroupCommit(self._executor, self._transactions)
        elif self._single is not None:
            self._group = GroupCommit(self._executor, self._pipelined)

    @property
    def commits(self) -> int:
        return self._commits

    @property
    def write_transactions(self) -> int:
        return self._write_transactions

    @property
    def backend_name(self) -> str:
        return self._backend.name

    # -- plumbing -------------------------------------------------------------

    async def _call(self, work: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise JournalUnavailable("the journal is closed")
        if self._group is not None:
            self._group.flush()  # writes queued before this call run before it
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(work, *args))

    async def _write(
        self, work: Callable[[Cursor], tuple[T, bool]], *, single_statement: bool = False
    ) -> T:
        """Run ``work`` in a write transaction (on SQLite shared with the writes queued
        with it: group_commit.py); count it if it committed a change.
        ``single_statement``: see _transaction."""
        if self._group is None or (self._single is not None and not isinstance(work, OneStatement)):
            done: tuple[T, bool] = await self._call(self._transaction, work, True, single_statement)
        elif self._closed:
            raise JournalUnavailable("the journal is closed")
        else:
            done = await self._group.write(work)
        value, wrote = done
        if wrote:
            self._commits += 1
        return value

    async def _read(self, work: Callable[[Cursor], T]) -> T:
        return await self._call(self._transaction, work, False)

    def _transaction(
        self, work: Callable[[Cursor], T], write: bool, single_statement: bool = False
    ) -> T:
        """``work(cursor)`` in one transaction (worker thread): commits on success,
        rolls back on any exception. Database errors surface as JournalUnavailable;
        our own errors (StaleVersion, InvalidWrite, ...) pass through after the
        rollback.

        A kept connection can have died while idle (a server restart, a
        terminated backend): that shows only when it is used. If it fails
        before anything could have been written (a read, or a write's BEGIN),
        the transaction runs once more on a fresh connection; after that, a
        failure is the database's answer.

        ``single_statement`` (PostgreSQL's submit and commit): the write is one
        statement on the autocommit connection, its own transaction, with no
        BEGIN to find a dead connection first. It recognises its own write
        when it landed (single_statement.py), so it may run once more after
        any failure on a connection found dead.
        """
        try:
            return self._attempt(work, write, single_statement)
        except _StaleConnection:
            return self._attempt(work, write, single_statement, retry=False)

    def _attempt(
        self,
        work: Callable[[Cursor], T],
        write: bool,
        single_statement: bool = False,
        *,
        retry: bool = True,
    ) -> T:
        backend = self._backend
        try:
            connection = self._connections.current().dbapi_connection
        except sa.exc.SQLAlchemyError as error:
            raise JournalUnavailable(f"journal database error: {error}") from error
        except backend.driver_errors as error:
            raise JournalUnavailable(f"journal database error: {error}") from error
        cursor = connection.cursor()
        began = False
        wrote_nothing = True
        try:
            try:
                began = backend.begin(cursor, write and not single_statement)
                wrote_nothing = not write or single_statement
                value = work(cursor)
                if began:
                    backend.commit(cursor)
                if write and (began or single_statement):
                    with self._tally:
                        self._write_transactions += 1
                return value
            except BaseException:
                if began:
                    self._roll_back(cursor)
                raise
            finally:
                cursor.close()
        except backend.driver_errors as error:
            if backend.is_broken(connection):
                self._connections.drop()
                if retry and wrote_nothing:
                    raise _StaleConnection from error
            raise JournalUnavailable(f"journal database error: {error}") from error

    def _transactions(self, works: Sequence[Work]) -> list[Outcome]:
        """Writes queued together (worker thread; group_commit.py): one alone runs as
        always; several share one transaction, each in its own savepoint. A failure
        of the transaction itself (BEGIN, COMMIT, a savepoint) fails every one."""
        if len(works) == 1:
            together: Work = works[0]
        else:

            def together(cursor: Cursor) -> list[Outcome]:
                return [self._in_savepoint(cursor, work) for work in works]

        try:
            value = self._transaction(together, True)
        except Exception as error:
            return [(False, error)] + [(False, _same_failure(error)) for _ in works[1:]]
        return [(True, value)] if len(works) == 1 else list(value)

    def _pipelined(self, works: Sequence[Work]) -> list[Outcome]:
        """PostgreSQL's one-statement writes queued together (worker thread): one
        alone runs as always; several go in one pipeline, one transaction
        (single_statement.sent_together). If that transaction failed, each runs
        alone: a statement error rolled all of them back (nothing of theirs
        landed, so none may take a row it finds for its own); a connection found
        dead may have committed them (the rerun recognises its own write)."""
        if len(works) == 1:
            return [self._alone(works[0])]
        statements = [work for work in works if isinstance(work, OneStatement)]
        assert len(statements) == len(works)  # _write sends no other kind here
        try:
            return self._transaction(
                lambda cursor: sent_together(cursor, statements), True, single_statement=True
            )
        except Exception as error:
            if server_refused(error):
                for work in statements:
                    work.refused()  # rolled back: nothing of theirs landed
            return [self._alone(work) for work in works]

    def _alone(self, work: Work) -> Outcome:
        try:
            return True, self._transaction(work, True, single_statement=True)
        except Exception as error:
            return False, error

    def _in_savepoint(self, cursor: Cursor, work: Work) -> Outcome:
        cursor.execute("SAVEPOINT journal_write")
        try:
            value = work(cursor)
        except Exception as error:
            cursor.execute("ROLLBACK TO SAVEPOINT journal_write")
            cursor.execute("RELEASE SAVEPOINT journal_write")
            if isinstance(error, self._backend.driver_errors):
                return False, _unavailable(error)
            return False, error
        cursor.execute("RELEASE SAVEPOINT journal_write")
        return True, value

    def _roll_back(self, cursor: Cursor) -> None:
        try:
            self._backend.rollback(cursor)
        except self._backend.driver_errors:
            self._connections.drop()  # cannot say what state it is in: never reuse it

    def _operations(self, statement: str, parameters: dict[str, Any]) -> list[OperationRecord]:
        def work(cursor: Cursor) -> list[OperationRecord]:
            cursor.execute(statement, parameters)
            decode = self._sql.operation.decode
            return [decode(row) for row in cursor.fetchall()]

        return self._transaction(work, False)

    async def _one(self, statement: str, parameters: dict[str, Any]) -> OperationRecord | None:
        found = await self._call(self._operations, statement, parameters)
        return found[0] if found else None

    # -- submit (C1) ----------------------------------------------------------

    async def submit(
        self, operation: OperationRecord, first_event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        stored, event = rules.prepare_submit(operation, first_event)
        if self._single is not None:
            work_one = self._single.submit_work(stored, event)
            return await self._write(work_one, single_statement=True)
        sql = self._sql

        def work(cursor: Cursor) -> tuple[tuple[OperationRecord, bool], bool]:
            # RETURNING says whether this insert made the row; rowcount after
            # ON CONFLICT DO NOTHING is not reliable across drivers.
            row = sql.operation.encode(stored)
            cursor.execute(sql.insert_operation, row)
            if cursor.fetchone() is not None:
                cursor.execute(sql.insert_envelope, row)
                cursor.execute(sql.insert_event, sql.event.encode(event))
                return (stored, False), True
            cursor.execute(
                sql.by_key,
                {
                    "principal": stored.principal,
                    "idempotency_key_digest": stored.idempotency_key_digest,
                },
            )
            row = cursor.fetchone()
            if row is None:
                raise InvalidWrite(f"operation id {stored.operation_id} already exists")
            existing = sql.operation.decode(row)
            if existing.request_digest != stored.request_digest:
                raise IdempotencyKeyReused(existing.operation_id)
            return (existing, True), False

        return await self._write(work)

    # -- reads ----------------------------------------------------------------

    async def get(self, operation_id: str) -> OperationRecord | None:
        return await self._one(self._sql.get, {"operation_id": operation_id})

    async def get_for_principal(self, principal: str, operation_id: str) -> OperationRecord | None:
        parameters = {"operation_id": operation_id, "principal": principal}
        return await self._one(self._sql.get_for_principal, parameters)

    async def by_idempotency_key(
        self, principal: str, idempotency_key_digest: str
    ) -> OperationRecord | None:
        parameters = {"principal": principal, "idempotency_key_digest": idempotency_key_digest}
        return await self._one(self._sql.by_key, parameters)

    async def list_for_principal(
        self,
        principal: str,
        states: Sequence[OpState],
        limit: int,
        after: PageCursor | None,
    ) -> list[OperationRecord]:
        statement, with_states = self._sql.listing(states, after is not None)
        parameters: dict[str, Any] = {"principal": principal, "limit": max(limit, 0)}
        if after is not None:
            created_at = rules.as_utc(after.created_at, "cursor")
            parameters["after_created_at"] = self._sql.dialect.encode_time(created_at)
            parameters["after_operation_id"] = after.operation_id
        return await self._call(self._operations, statement, with_states(parameters))

    async def due(self, now: datetime, limit: int, *, queued: bool = True) -> list[OperationRecord]:
        now = rules.as_utc(now, "due time")
        statement = self._sql.due if queued else self._sql.due_not_queued
        parameters = {"now": self._sql.dialect.encode_time(now), "limit": max(limit, 0)}
        return await self._call(self._operations, statement, parameters)

    async def in_state(self, state: OpState, limit: int) -> list[OperationRecord]:
        parameters = {"state": state.value, "limit": max(limit, 0)}
        return await self._call(self._operations, self._sql.in_state, parameters)

    async def bound_to(
        self, runner: str, state: OpState, limit: int, *, other_than: str | None = None
    ) -> list[OperationRecord]:
        parameters = {"state": state.value, "runner": runner, "limit": max(limit, 0)}
        if other_than is None:
            return await self._call(self._operations, self._sql.bound_to, parameters)
        parameters["incarnation"] = other_than
        return await self._call(self._operations, self._sql.bound_elsewhere, parameters)

    async def events(self, operation_id: str, after_sequence: int, limit: int) -> list[EventRecord]:
        sql = self._sql
        parameters = {"operation_id": operation_id, "after": after_sequence, "limit": max(limit, 0)}

        def work(cursor: Cursor) -> list[EventRecord]:
            cursor.execute(sql.events, parameters)
            return [sql.event.decode(row) for row in cursor.fetchall()]

        return await self._read(work)

    async def attempts(self, operation_id: str) -> list[AttemptRecord]:
        sql = self._sql

        def work(cursor: Cursor) -> list[AttemptRecord]:
            cursor.execute(sql.attempts, {"operation_id": operation_id})
            return [sql.attempt.decode(row) for row in cursor.fetchall()]

        return await self._read(work)

    # -- commit (C4, C13, §5) -------------------------------------------------

    async def commit(self, change: Change) -> OperationRecord:
        stored, event, attempt = rules.prepare_change(change)
        before = change.before
        sql = self._sql
        row = sql.operation.encode(stored)
        parameters = {name: row[name] for name in sql.mutable_fields}
        parameters.update(
            where_operation_id=before.operation_id,
            where_version=before.version,
            where_fencing_token=before.fencing_token,
            where_state=before.state.value,
        )
        closes = [update.number for update in change.attempt_updates]
        inserted = None if attempt is None else attempt.number
        if self._single is not None and distinct_closes(closes, inserted):
            one = self._single.commit_work(change, stored, event, attempt, parameters)
            return await self._write(one, single_statement=True)

        def work(cursor: Cursor) -> tuple[OperationRecord, bool]:
            cursor.execute(sql.compare_and_set, parameters)
            if cursor.rowcount != 1:
                self._raise_conflict(cursor, before)
            if event is not None:
                cursor.execute(sql.insert_event, sql.event.encode(event))
            if attempt is not None:
                cursor.execute(sql.insert_attempt, sql.attempt.encode(attempt))
            for update in change.attempt_updates:
                cursor.execute(
                    sql.close_attempt,
                    {
                        "outcome": update.outcome.value,
                        "detail": update.detail,
                        "operation_id": before.operation_id,
                        "number": update.number,
                    },
                )
                if cursor.rowcount != 1:
                    raise InvalidWrite(f"{before.operation_id}: no attempt {update.number}")
            return stored, True

        return await self._write(work)

    def _raise_conflict(self, cursor: Cursor, before: OperationRecord) -> None:
        cursor.execute(self._sql.version_and_token, {"operation_id": before.operation_id})
        current = cursor.fetchone()
        if current is None:
            raise InvalidWrite(f"operation {before.operation_id} does not exist")
        version, fencing_token = current
        if fencing_token != before.fencing_token:
            raise LeaseLost(f"{before.operation_id}: fencing token is now {fencing_token}")
        raise StaleVersion(f"{before.operation_id}: version is now {version}")

    # -- lifecycle ------------------------------------------------------------

    async def close(self) -> None:
        """Refuse new calls, let the ones in flight finish, then close the connections."""
        if self._closed:
            return
        self._closed = True
        if self._group is not None:
            self._group.flush()  # writes already queued are in flight: they finish
        await asyncio.to_thread(self._executor.shutdown, True)
        await asyncio.to_thread(self._connections.close_all)
        await asyncio.to_thread(self._engine.dispose)


def open_journal(
    url: str, *, busy_timeout: float = 5.0, one_statement_writes: bool = True
) -> SqlJournal:
    """Open the journal at ``url`` (sync; call it before or at service start).

    ``sqlite:///PATH`` or ``postgresql+psycopg://USER@HOST:PORT/DB``. Never
    changes the schema: a journal without one, or with an older one, raises
    JournalNotMigrated (run ``python -m coordinator_svc migrate``); one
    written by newer code raises SchemaTooNew; an unreachable database
    raises JournalUnavailable. ``busy_timeout`` (seconds) bounds how long a
    write waits for a lock another connection holds (SQLite busy_timeout,
    PostgreSQL lock_timeout) and how long connecting may take (PostgreSQL).
    ``one_statement_writes=False`` keeps PostgreSQL's writes in their
    multi-statement form, one transaction each (for comparison only).
    """
    engine, backend = schema.open_checked_engine(url, busy_timeout)
    return SqlJournal(engine, backend, one_statement_writes=one_statement_writes)
