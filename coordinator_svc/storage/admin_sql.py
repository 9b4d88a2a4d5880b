"""The operator's records on a SQL journal (PROTOCOL.md §10): ``ports.AdminJournal``.

Mixed into ``sql.SqlJournal`` like ``leases.SqlLeases``. None of this is on
a turn's hot path, so each statement is built per call where its shape
depends on the filter (IN lists), with the dialect's parameter style.

Every write reads what it depends on in its own transaction and applies
``admin_rules`` there: a verdict or requeue is refused by the journal too,
not only by the API. Races are settled by the keys (0006): a second verdict
or requeue meets the primary key (or the requeued operation's unique
idempotency key) and is answered with what the first stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from coordinator_svc.core.model import EventRecord, OperationRecord
from coordinator_svc.core.operator import (
    DrainRecord,
    OperationFilter,
    OperatorNotes,
    RequeueRecord,
    Verdict,
    VerdictRecord,
)
from coordinator_svc.ports import InvalidWrite, JournalUnavailable, PageCursor
from coordinator_svc.storage import admin_rules, rules
from coordinator_svc.storage.statements import Statements

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

Cursor = Any

_VERDICT_COLUMNS = "operation_id, sequence, verdict, recorded_by, reason, recorded_at"
_REQUEUE_COLUMNS = "operation_id, requeued_as, requeued_by, reason, requeued_at"
_DRAIN_COLUMNS = "runner, drained_by, reason, drained_at"
# Bound on one IN list (SQLite allows 32766 parameters; a page is at most 500).
_MAX_IDS = 1000


def _in_list(prefix: str, values: Sequence[str], parameters: dict[str, Any]) -> str:
    names = []
    for index, value in enumerate(values):
        name = f"{prefix}_{index}"
        parameters[name] = value
        names.append(":" + name)
    return ", ".join(names)


class SqlAdmin:
    """The AdminJournal half of ``sql.SqlJournal`` (mixed into it)."""

    _sql: Statements

    # Provided by SqlJournal.
    _write: Callable[..., Awaitable[Any]]
    _read: Callable[..., Awaitable[Any]]
    _call: Callable[..., Awaitable[Any]]
    _operations: Callable[[str, dict[str, Any]], list[OperationRecord]]

    # -- codecs -----------------------------------------------------------------

    def _verdict(self, row: Sequence[Any]) -> VerdictRecord:
        decode = self._sql.dialect.decode_time
        return VerdictRecord(row[0], Verdict(row[2]), row[3], row[4], decode(row[5]))

    def _requeue(self, row: Sequence[Any]) -> RequeueRecord:
        return RequeueRecord(row[0], row[1], row[2], row[3], self._sql.dialect.decode_time(row[4]))

    def _drain(self, row: Sequence[Any]) -> DrainRecord:
        return DrainRecord(row[0], row[1], row[2], self._sql.dialect.decode_time(row[3]))

    def _get_in(self, cursor: Cursor, operation_id: str) -> OperationRecord | None:
        cursor.execute(self._sql.get, {"operation_id": operation_id})
        row = cursor.fetchone()
        return None if row is None else self._sql.operation.decode(row)

    def _first_verdict_in(self, cursor: Cursor, operation_id: str) -> VerdictRecord | None:
        cursor.execute(
            self._sql.dialect.sql(
                f"SELECT {_VERDICT_COLUMNS} FROM operator_verdicts"
                " WHERE operation_id = :operation_id ORDER BY sequence LIMIT 1"
            ),
            {"operation_id": operation_id},
        )
        row = cursor.fetchone()
        return None if row is None else self._verdict(row)

    # -- listing ----------------------------------------------------------------

    async def list_operations(
        self, where: OperationFilter, limit: int, after: PageCursor | None
    ) -> list[OperationRecord]:
        parameters: dict[str, Any] = {"limit": max(limit, 0)}
        clauses = []
        if where.states:
            states = [s.value for s in where.states]
            clauses.append(f"state IN ({_in_list('state', states, parameters)})")
        if where.executions:
            executions = [e.value for e in where.executions]
            clauses.append(f"execution IN ({_in_list('execution', executions, parameters)})")
        for column in ("principal", "runner", "pool"):
            value = getattr(where, column)
            if value:
                clauses.append(f"{column} = :{column}")
                parameters[column] = value
        if where.without_verdict:
            clauses.append(
                "NOT EXISTS (SELECT 1 FROM operator_verdicts v"
                " WHERE v.operation_id = operations.operation_id)"
            )
        if after is not None:
            created_at = rules.as_utc(after.created_at, "cursor")
            parameters["after_created_at"] = self._sql.dialect.encode_time(created_at)
            parameters["after_operation_id"] = after.operation_id
            clauses.append(
                "(created_at > :after_created_at OR"
                " (created_at = :after_created_at AND operation_id > :after_operation_id))"
            )
        condition = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        statement = self._sql.dialect.sql(
            f"{self._sql.select_operations}{condition}"
            " ORDER BY created_at, operation_id LIMIT :limit"
        )
        found: list[OperationRecord] = await self._call(self._operations, statement, parameters)
        return found

    # -- verdicts (V2, V3) ------------------------------------------------------

    async def record_verdict(self, verdict: VerdictRecord) -> tuple[VerdictRecord, bool]:
        sql = self._sql
        insert = sql.dialect.sql(
            f"INSERT INTO operator_verdicts ({_VERDICT_COLUMNS}) VALUES (:operation_id,"
            " :sequence, :verdict, :recorded_by, :reason, :recorded_at)"
            " ON CONFLICT DO NOTHING RETURNING operation_id"
        )

        def work(cursor: Cursor) -> tuple[tuple[VerdictRecord, bool], bool]:
            first = self._first_verdict_in(cursor, verdict.operation_id)
            if first is not None:
                return (first, False), False
            stored = admin_rules.check_verdict(self._get_in(cursor, verdict.operation_id), verdict)
            cursor.execute(
                insert,
                {
                    "operation_id": stored.operation_id,
                    "sequence": admin_rules.FIRST_VERDICT,
                    "verdict": stored.verdict.value,
                    "recorded_by": stored.recorded_by,
                    "reason": stored.reason,
                    "recorded_at": sql.dialect.encode_time(stored.recorded_at),
                },
            )
            if cursor.fetchone() is not None:
                return (stored, True), True
            # Another writer's verdict committed first: it is the one that counts.
            raced = self._first_verdict_in(cursor, verdict.operation_id)
            if raced is None:  # pragma: no cover - the conflict means a row exists
                raise InvalidWrite("verdict conflict without a verdict")
            return (raced, False), False

        result: tuple[VerdictRecord, bool] = await self._write(work)
        return result

    async def verdicts(self, operation_id: str) -> list[VerdictRecord]:
        statement = self._sql.dialect.sql(
            f"SELECT {_VERDICT_COLUMNS} FROM operator_verdicts"
            " WHERE operation_id = :operation_id ORDER BY sequence"
        )

        def work(cursor: Cursor) -> list[VerdictRecord]:
            cursor.execute(statement, {"operation_id": operation_id})
            return [self._verdict(row) for row in cursor.fetchall()]

        found: list[VerdictRecord] = await self._read(work)
        return found

    async def operator_notes(self, operation_ids: Sequence[str]) -> dict[str, OperatorNotes]:
        ids = list(dict.fromkeys(operation_ids))[:_MAX_IDS]
        if not ids:
            return {}
        sql = self._sql

        def work(cursor: Cursor) -> dict[str, OperatorNotes]:
            parameters: dict[str, Any] = {}
            listed = _in_list("id", ids, parameters)
            cursor.execute(
                sql.dialect.sql(
                    f"SELECT {_VERDICT_COLUMNS} FROM operator_verdicts"
                    f" WHERE operation_id IN ({listed}) ORDER BY operation_id, sequence"
                ),
                parameters,
            )
            verdicts: dict[str, VerdictRecord] = {}
            for row in cursor.fetchall():
                verdicts.setdefault(row[0], self._verdict(row))
            cursor.execute(
                sql.dialect.sql(
                    f"SELECT {_REQUEUE_COLUMNS} FROM operation_requeues"
                    f" WHERE operation_id IN ({listed}) OR requeued_as IN ({listed})"
                ),
                parameters,
            )
            links = [self._requeue(row) for row in cursor.fetchall()]
            return _notes(ids, verdicts, links)

        found: dict[str, OperatorNotes] = await self._read(work)
        return found

    # -- requeue (V5, V6) -------------------------------------------------------

    async def requeue(
        self, link: RequeueRecord, operation: OperationRecord, first_event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        sql = self._sql
        select_link = sql.dialect.sql(
            "SELECT requeued_as FROM operation_requeues WHERE operation_id = :operation_id"
        )
        insert_link = sql.dialect.sql(
            f"INSERT INTO operation_requeues ({_REQUEUE_COLUMNS}) VALUES (:operation_id,"
            " :requeued_as, :requeued_by, :reason, :requeued_at)"
        )

        def existing(cursor: Cursor) -> OperationRecord | None:
            cursor.execute(select_link, {"operation_id": link.operation_id})
            row = cursor.fetchone()
            return None if row is None else self._get_in(cursor, row[0])

        def work(cursor: Cursor) -> tuple[tuple[OperationRecord, bool], bool]:
            made = existing(cursor)
            if made is not None:
                return (made, True), False
            original = self._get_in(cursor, link.operation_id)
            verdict = (
                None if original is None else self._first_verdict_in(cursor, link.operation_id)
            )
            stored_link, stored, event = admin_rules.check_requeue(
                original, verdict, link, operation, first_event
            )
            row = sql.operation.encode(stored)
            cursor.execute(sql.insert_operation, row)
            if cursor.fetchone() is None:
                # Another requeue of the same original holds its key: that one counts.
                cursor.execute(
                    sql.by_key,
                    {
                        "principal": stored.principal,
                        "idempotency_key_digest": stored.idempotency_key_digest,
                    },
                )
                found = cursor.fetchone()
                if found is None:
                    raise InvalidWrite(f"operation id {stored.operation_id} exists")
                return (sql.operation.decode(found), True), False
            cursor.execute(sql.insert_envelope, row)
            cursor.execute(sql.insert_event, sql.event.encode(event))
            cursor.execute(
                insert_link,
                {
                    "operation_id": stored_link.operation_id,
                    "requeued_as": stored_link.requeued_as,
                    "requeued_by": stored_link.requeued_by,
                    "reason": stored_link.reason,
                    "requeued_at": sql.dialect.encode_time(stored_link.requeued_at),
                },
            )
            return (stored, False), True

        result: tuple[OperationRecord, bool] = await self._write(work)
        return result

    # -- drains (V8) ------------------------------------------------------------

    async def drain(self, record: DrainRecord) -> tuple[DrainRecord, bool]:
        stored = admin_rules.check_drain(record)
        sql = self._sql
        insert = sql.dialect.sql(
            f"INSERT INTO runner_drains ({_DRAIN_COLUMNS}) VALUES (:runner, :drained_by,"
            " :reason, :drained_at) ON CONFLICT DO NOTHING RETURNING runner"
        )
        select = sql.dialect.sql(f"SELECT {_DRAIN_COLUMNS} FROM runner_drains WHERE runner = :r")

        def work(cursor: Cursor) -> tuple[tuple[DrainRecord, bool], bool]:
            cursor.execute(
                insert,
                {
                    "runner": stored.runner,
                    "drained_by": stored.drained_by,
                    "reason": stored.reason,
                    "drained_at": sql.dialect.encode_time(stored.drained_at),
                },
            )
            if cursor.fetchone() is not None:
                return (stored, True), True
            cursor.execute(select, {"r": stored.runner})
            row = cursor.fetchone()
            if row is None:  # undrained between the two statements: nothing changed
                raise JournalUnavailable(f"draining {stored.runner} raced an undrain: try again")
            return (self._drain(row), False), False

        result: tuple[DrainRecord, bool] = await self._write(work)
        return result

    async def undrain(self, runner: str) -> DrainRecord | None:
        sql = self._sql
        select = sql.dialect.sql(f"SELECT {_DRAIN_COLUMNS} FROM runner_drains WHERE runner = :r")
        delete = sql.dialect.sql("DELETE FROM runner_drains WHERE runner = :r")

        def work(cursor: Cursor) -> tuple[DrainRecord | None, bool]:
            cursor.execute(select, {"r": runner})
            row = cursor.fetchone()
            if row is None:
                return None, False
            cursor.execute(delete, {"r": runner})
            return self._drain(row), cursor.rowcount == 1

        result: DrainRecord | None = await self._write(work)
        return result

    async def drains(self) -> list[DrainRecord]:
        statement = self._sql.dialect.sql(
            f"SELECT {_DRAIN_COLUMNS} FROM runner_drains ORDER BY runner"
        )

        def work(cursor: Cursor) -> list[DrainRecord]:
            cursor.execute(statement, {})
            return [self._drain(row) for row in cursor.fetchall()]

        found: list[DrainRecord] = await self._read(work)
        return found


def _notes(
    ids: Sequence[str], verdicts: dict[str, VerdictRecord], links: Sequence[RequeueRecord]
) -> dict[str, OperatorNotes]:
    """Each id's notes from its verdict and the links naming it (either end)."""
    requeued_as = {link.operation_id: link.requeued_as for link in links}
    requeued_from = {link.requeued_as: link.operation_id for link in links}
    notes = {}
    for op_id in ids:
        note = OperatorNotes(verdicts.get(op_id), requeued_from.get(op_id), requeued_as.get(op_id))
        if note != OperatorNotes():
            notes[op_id] = note
    return notes


notes_from = _notes  # the fake journal builds the same answer from its dicts
