"""PostgreSQL: a journal write as one statement, its own transaction (issue 10).

A submit or a commit on PostgreSQL used to be BEGIN, two to four statements
and COMMIT: four to six round trips, each costing the coordinator a psycopg
call and the server a parse-bind-execute. Here each is one statement whose
data-modifying CTEs do the same work, sent on the autocommit connection, so
it commits or rolls back whole by itself (``bench/journal_writes.py``
measures both forms on a throwaway cluster).

Writes queued together go in one pipeline (``sent_together``): one round
trip and one implicit transaction, so one commit and one WAL flush for all
of them, as group commit does on SQLite. A statement the server refuses
rolls the pipeline back, and each write then runs alone for its own answer.

What each statement keeps from the multi-statement form:

- the compare-and-set: the ``changed`` CTE is the same conditional UPDATE,
  and every other row it writes is selected ``FROM changed``, so nothing is
  written unless the CAS matched (C4, §5 fencing);
- an attempt it closes must exist: the CAS itself requires it (``EXISTS``),
  so a missing attempt writes nothing; the conflict path then names it
  (``InvalidWrite``) where the old form found it by a rowcount;
- its own landed write is recognised: a kept connection that died while idle
  is seen only when the statement is sent, and then nobody can say whether
  the server ran it. The statement runs once more on a fresh connection,
  and finds its own write instead of a conflict: a submit finds its own
  operation id under its key (ids are fresh per submit, so never a client's
  replay), a commit finds the row it meant to write. Only a run after one
  whose outcome is unknown may do so: after a pipeline the server refused
  (rolled back), the next run is a first run again.

SQLite keeps the multi-statement form: its round trips are function calls,
and it has no data-modifying CTEs.

Parameters of the rows selected ``FROM changed`` are cast to their column
types: an INSERT ... SELECT does not infer parameter types from its target
columns as INSERT ... VALUES does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from coordinator_svc.core.model import AttemptRecord, Change, EventRecord, OperationRecord
from coordinator_svc.ports import (
    IdempotencyKeyReused,
    InvalidWrite,
    JournalUnavailable,
    LeaseLost,
    StaleVersion,
)
from coordinator_svc.storage.statements import Statements
from coordinator_svc.storage.tables import attempts, events

Cursor = Any  # a psycopg cursor on the autocommit connection
# One write's result: (True, its value) or (False, the exception its caller gets).
Outcome = tuple[bool, Any]
T = TypeVar("T")


class OneStatement(Generic[T]):
    """One journal write as one statement, and what its row count means.

    Called with a cursor it runs alone (its own transaction);
    ``sent_together`` runs several in one round trip and one transaction.
    ``finish`` turns the count the statement returned into the write's value
    (and whether it wrote), reading more if it has to. Its last argument,
    ``may_have_landed``, says an earlier send of this statement got no answer
    (the connection died with it sent), so a row it finds may be its own. A
    send that was answered, a count or a refusal, wrote what it said and
    nothing else: a later send is a first run again.
    """

    def __init__(
        self,
        statement: str,
        parameters: dict[str, Any],
        finish: Callable[[Cursor, int, bool], tuple[T, bool]],
    ) -> None:
        self.statement = statement
        self.parameters = parameters
        self._finish = finish
        self._unanswered = False  # sent, and no answer came back yet
        self._may_have_landed = False

    def send(self, cursor: Cursor) -> None:
        if self._unanswered:
            self._may_have_landed = True  # the send before this one got no answer
        self._unanswered = True
        cursor.execute(self.statement, self.parameters)

    def refused(self) -> None:
        """The server refused the transaction it was sent in: it wrote nothing."""
        self._unanswered = False

    def finish(self, cursor: Cursor, count: int) -> tuple[T, bool]:
        self._unanswered = False
        return self._finish(cursor, count, self._may_have_landed)

    def __call__(self, cursor: Cursor) -> tuple[T, bool]:
        self.send(cursor)
        return self.finish(cursor, cursor.fetchone()[0])


EVENT_PREFIX = "event_"
ATTEMPT_PREFIX = "attempt_"


def close_prefix(index: int) -> str:
    return f"close{index}_"


def _cast_select(table: sa.Table, fields: Sequence[tuple[str, str]], prefix: str) -> str:
    """``SELECT CAST(%(prefix+column)s AS type), ...`` in the codec's field order."""
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    casts = [
        f"CAST(%({prefix}{name})s AS {table.columns[name].type.compile(dialect=dialect)})"
        for name, _ in fields
    ]
    return "SELECT " + ", ".join(casts)


class SingleStatements:
    """The one-statement submit and commit texts for PostgreSQL, built once each."""

    def __init__(self, sql: Statements) -> None:
        if sql.dialect.sqlite:
            raise ValueError("single-statement writes are PostgreSQL's (data-modifying CTEs)")
        self._sql = sql
        op = sql.operation
        op_params = sql.dialect.sql(op.stored_params)
        # The operation row, its envelope (its own table, 0004) and its first
        # event (sequence 1), or nothing when the key or the id is taken (then
        # submit reads what holds it).
        self.submit = (
            f"WITH made AS (INSERT INTO operations ({op.stored_columns}) VALUES ({op_params})"
            " ON CONFLICT DO NOTHING RETURNING operation_id),"
            " envelope AS (INSERT INTO operation_envelopes (operation_id, envelope)"
            " SELECT operation_id, CAST(%(envelope)s AS bytea) FROM made),"
            f" first_event AS (INSERT INTO events ({sql.event.columns})"
            f" {_cast_select(events, sql.event.fields, EVENT_PREFIX)} FROM made)"
            " SELECT count(*) FROM made"
        )
        self._commits: dict[tuple[bool, bool, int], str] = {}

    def commit(self, with_event: bool, with_attempt: bool, closes: int) -> str:
        """The CAS, the event and attempt it adds, and ``closes`` attempt updates."""
        key = (with_event, with_attempt, closes)
        text = self._commits.get(key)
        if text is None:
            text = self._commits[key] = self._build_commit(with_event, with_attempt, closes)
        return text

    def _build_commit(self, with_event: bool, with_attempt: bool, closes: int) -> str:
        sql = self._sql
        must_exist = "".join(
            " AND EXISTS (SELECT 1 FROM attempts WHERE attempts.operation_id ="
            f" %(where_operation_id)s AND attempts.number = %({close_prefix(i)}number)s)"
            for i in range(closes)
        )
        parts = [
            "changed AS (UPDATE operations SET "
            + ", ".join(f"{name} = %({name})s" for name in sql.mutable_fields)
            + " WHERE operation_id = %(where_operation_id)s AND version = %(where_version)s"
            " AND fencing_token = %(where_fencing_token)s AND state = %(where_state)s"
            f"{must_exist} RETURNING operation_id)"
        ]
        if with_event:
            parts.append(
                f"new_event AS (INSERT INTO events ({sql.event.columns})"
                f" {_cast_select(events, sql.event.fields, EVENT_PREFIX)} FROM changed)"
            )
        if with_attempt:
            parts.append(
                f"new_attempt AS (INSERT INTO attempts ({sql.attempt.columns})"
                f" {_cast_select(attempts, sql.attempt.fields, ATTEMPT_PREFIX)} FROM changed)"
            )
        for i in range(closes):
            p = close_prefix(i)
            parts.append(
                f"closed{i} AS (UPDATE attempts SET outcome = %({p}outcome)s,"
                f" detail = %({p}detail)s FROM changed"
                " WHERE attempts.operation_id = changed.operation_id"
                f" AND attempts.number = %({p}number)s)"
            )
        return "WITH " + ", ".join(parts) + " SELECT count(*) FROM changed"

    # -- the work each runs in its worker thread (sql.SqlJournal._write) -------

    def submit_work(
        self, stored: OperationRecord, event: EventRecord
    ) -> OneStatement[tuple[OperationRecord, bool]]:
        """submit's write: the insert, else the operation that holds the key."""
        sql = self._sql
        parameters = sql.operation.encode(stored) | sql.event.encode(event, EVENT_PREFIX)
        key = {
            "principal": stored.principal,
            "idempotency_key_digest": stored.idempotency_key_digest,
        }

        def finish(
            cursor: Cursor, count: int, may_have_landed: bool
        ) -> tuple[tuple[OperationRecord, bool], bool]:
            if count == 1:
                return (stored, False), True
            cursor.execute(sql.by_key, key)
            row = cursor.fetchone()
            if row is None:
                raise InvalidWrite(f"operation id {stored.operation_id} already exists")
            existing = sql.operation.decode(row)
            if may_have_landed and existing.operation_id == stored.operation_id:
                # An earlier send landed and its answer was lost (ids are fresh
                # per submit: never a client's replay).
                return (stored, False), True
            if existing.request_digest != stored.request_digest:
                raise IdempotencyKeyReused(existing.operation_id)
            return (existing, True), False

        return OneStatement(self.submit, parameters, finish)

    def commit_work(
        self,
        change: Change,
        stored: OperationRecord,
        event: EventRecord | None,
        attempt: AttemptRecord | None,
        parameters: dict[str, Any],
    ) -> OneStatement[OperationRecord]:
        """commit's write: the CAS and every row with it, else why not (``parameters``:
        the CAS's, as the multi-statement form has them)."""
        sql = self._sql
        updates = change.attempt_updates
        statement = self.commit(event is not None, attempt is not None, len(updates))
        parameters = dict(parameters)
        if event is not None:
            parameters |= sql.event.encode(event, EVENT_PREFIX)
        if attempt is not None:
            parameters |= sql.attempt.encode(attempt, ATTEMPT_PREFIX)
        for index, update in enumerate(updates):
            prefix = close_prefix(index)
            parameters[prefix + "number"] = update.number
            parameters[prefix + "outcome"] = update.outcome.value
            parameters[prefix + "detail"] = update.detail

        def finish(
            cursor: Cursor, count: int, may_have_landed: bool
        ) -> tuple[OperationRecord, bool]:
            if count != 1:
                self._conflict(cursor, change, stored, may_have_landed=may_have_landed)
            return stored, True

        return OneStatement(statement, parameters, finish)

    def _conflict(
        self, cursor: Cursor, change: Change, stored: OperationRecord, *, may_have_landed: bool
    ) -> None:
        """Why a commit wrote nothing. When an earlier send got no answer it returns
        if the row is already what it meant to write: that send landed. Never
        otherwise: a stale ``before`` can compute the very row another write
        already made, and that is a conflict (no double dispatch, §5)."""
        before = change.before
        cursor.execute(self._sql.get, {"operation_id": before.operation_id})
        row = cursor.fetchone()
        if row is None:
            raise InvalidWrite(f"operation {before.operation_id} does not exist")
        current = self._sql.operation.decode(row)
        if may_have_landed and current == stored:
            return
        if current.fencing_token != before.fencing_token:
            raise LeaseLost(f"{before.operation_id}: fencing token is now {current.fencing_token}")
        if current.version == before.version:
            # The CAS required each attempt it closes to exist.
            for update in change.attempt_updates:
                cursor.execute(
                    "SELECT 1 FROM attempts WHERE operation_id = %(operation_id)s"
                    " AND number = %(number)s",
                    {"operation_id": before.operation_id, "number": update.number},
                )
                if cursor.fetchone() is None:
                    raise InvalidWrite(f"{before.operation_id}: no attempt {update.number}")
        raise StaleVersion(f"{before.operation_id}: version is now {current.version}")


def sent_together(cursor: Cursor, works: Sequence[OneStatement[Any]]) -> list[Outcome]:
    """Several writes in one pipeline (worker thread): one round trip, one implicit
    transaction, so one commit and one WAL flush for all of them (group commit, as
    on SQLite). A statement that fails rolls back the whole pipeline and raises
    (the caller then runs each alone); otherwise each write's own outcome comes
    back: a lost compare-and-set or a taken key is that write's answer alone, read
    after the commit (psycopg's ``Connection.pipeline``)."""
    connection = cursor.connection
    cursors = [connection.cursor() for _ in works]
    try:
        with connection.pipeline():
            for work, own in zip(works, cursors, strict=True):
                work.send(own)
        counts = [own.fetchone()[0] for own in cursors]
        outcomes: list[Outcome] = []
        for work, own, count in zip(works, cursors, counts, strict=True):
            try:
                outcomes.append((True, work.finish(own, count)))
            except psycopg.Error as error:  # a read after the commit failed: fail closed
                failure = JournalUnavailable(f"journal database error: {error}")
                failure.__cause__ = error
                outcomes.append((False, failure))
            except Exception as error:  # that write's own answer (a conflict, a reused key)
                outcomes.append((False, error))
        return outcomes
    finally:
        for own in cursors:
            own.close()


def server_refused(error: BaseException) -> bool:
    """Whether the server answered with an SQL error (an SQLSTATE): then it rolled
    the transaction back. Anything else (a connection lost, no answer) leaves
    unknown whether it committed."""
    cause: BaseException | None = error
    while cause is not None:
        if getattr(cause, "sqlstate", None):
            return True
        cause = cause.__cause__
    return False


def distinct_closes(numbers: Sequence[int], inserted: int | None) -> bool:
    """Whether a change's attempt closes fit one statement: each row at most once,
    and none the attempt the same statement inserts (CTEs see one snapshot)."""
    return len(set(numbers)) == len(numbers) and inserted not in numbers
