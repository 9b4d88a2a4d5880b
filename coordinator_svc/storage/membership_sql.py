"""Runner membership on a SQL journal (PROTOCOL.md §11), half of ``ports.AdminJournal``.

Mixed into ``sql.SqlJournal`` beside ``admin_sql.SqlAdmin``. Not on a turn's
hot path. Each write reads the name's latest record (and, for a removal, its
drain and its bound turns) in its own transaction and applies
``admin_rules``; the primary key (runner, sequence) settles two writers
racing on one name: the second insert meets the key, stores nothing, and is
answered from what the first stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from coordinator_svc.core.membership import (
    BOUND_STATES,
    MemberAction,
    MembershipRecord,
    RunnerRoster,
    kinds_from_text,
    kinds_text,
)
from coordinator_svc.core.operator import DrainRecord
from coordinator_svc.ports import JournalUnavailable
from coordinator_svc.storage import admin_rules
from coordinator_svc.storage.statements import Statements

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

Cursor = Any

_COLUMNS = (
    "runner, sequence, action, address, pool, kinds, recorded_by, reason, recorded_at,"
    " forced, bound_turns"
)
_BOUND = ", ".join(f"'{state.value}'" for state in BOUND_STATES)


class SqlMembership:
    """The membership half of ``sql.SqlJournal`` (mixed into it)."""

    _sql: Statements

    # Provided by SqlJournal (and SqlAdmin).
    _write: Callable[..., Awaitable[Any]]
    _read: Callable[..., Awaitable[Any]]
    _drain: Callable[[Sequence[Any]], DrainRecord]

    def _member(self, row: Sequence[Any]) -> MembershipRecord:
        return MembershipRecord(
            runner=row[0],
            sequence=int(row[1]),
            action=MemberAction(row[2]),
            address=row[3],
            pool=row[4],
            kinds=kinds_from_text(row[5]),
            recorded_by=row[6],
            reason=row[7],
            recorded_at=self._sql.dialect.decode_time(row[8]),
            forced=bool(row[9]),
            bound_turns=int(row[10]),
        )

    def _latest_in(self, cursor: Cursor, runner: str) -> MembershipRecord | None:
        cursor.execute(
            self._sql.dialect.sql(
                f"SELECT {_COLUMNS} FROM runner_membership WHERE runner = :runner"
                " ORDER BY sequence DESC LIMIT 1"
            ),
            {"runner": runner},
        )
        row = cursor.fetchone()
        return None if row is None else self._member(row)

    def _insert_in(self, cursor: Cursor, record: MembershipRecord) -> bool:
        """Insert ``record``; False if its (runner, sequence) was taken meanwhile."""
        cursor.execute(
            self._sql.dialect.sql(
                f"INSERT INTO runner_membership ({_COLUMNS}) VALUES (:runner, :sequence,"
                " :action, :address, :pool, :kinds, :recorded_by, :reason, :recorded_at,"
                " :forced, :bound_turns) ON CONFLICT DO NOTHING RETURNING runner"
            ),
            {
                "runner": record.runner,
                "sequence": record.sequence,
                "action": record.action.value,
                "address": record.address,
                "pool": record.pool,
                "kinds": kinds_text(record.kinds),
                "recorded_by": record.recorded_by,
                "reason": record.reason,
                "recorded_at": self._sql.dialect.encode_time(record.recorded_at),
                "forced": record.forced,
                "bound_turns": record.bound_turns,
            },
        )
        return cursor.fetchone() is not None

    def _bound_in(self, cursor: Cursor, runner: str | None) -> dict[str, int]:
        where = " AND runner = :runner" if runner is not None else ""
        cursor.execute(
            self._sql.dialect.sql(
                "SELECT runner, count(*) FROM operations"
                f" WHERE state IN ({_BOUND}) AND runner IS NOT NULL{where} GROUP BY runner"
            ),
            {"runner": runner} if runner is not None else {},
        )
        return {str(row[0]): int(row[1]) for row in cursor.fetchall()}

    async def add_runner(self, record: MembershipRecord) -> tuple[MembershipRecord, bool]:
        def work(cursor: Cursor) -> tuple[tuple[MembershipRecord, bool], bool]:
            latest = self._latest_in(cursor, record.runner)
            stored = admin_rules.check_add(latest, record)
            if stored is None:
                assert latest is not None  # a replay has a live member
                return (latest, False), False
            if self._insert_in(cursor, stored):
                return (stored, True), True
            # Another writer's record took the sequence: answer as it stands now.
            raced = self._latest_in(cursor, record.runner)
            if admin_rules.check_add(raced, record) is not None or raced is None:
                raise JournalUnavailable(f"adding {record.runner} raced another change: try again")
            return (raced, False), False

        result: tuple[MembershipRecord, bool] = await self._write(work)
        return result

    async def remove_runner(
        self,
        runner: str,
        *,
        generation: int,
        by: str,
        reason: str,
        at: datetime,
        force: bool,
    ) -> tuple[MembershipRecord, bool]:
        sql = self._sql
        drained = sql.dialect.sql("SELECT 1 FROM runner_drains WHERE runner = :runner")
        undrain = sql.dialect.sql("DELETE FROM runner_drains WHERE runner = :runner")

        def work(cursor: Cursor) -> tuple[tuple[MembershipRecord, bool], bool]:
            latest = self._latest_in(cursor, runner)
            cursor.execute(drained, {"runner": runner})
            is_drained = cursor.fetchone() is not None
            bound = self._bound_in(cursor, runner).get(runner, 0)
            stored = admin_rules.check_removal(
                runner,
                latest,
                generation=generation,
                drained=is_drained,
                bound=bound,
                by=by,
                reason=reason,
                at=at,
                force=force,
            )
            if stored is None:
                assert latest is not None  # a replay names the recorded removal
                return (latest, False), False
            if not self._insert_in(cursor, stored):
                raced = self._latest_in(cursor, runner)
                if raced is None or raced.is_member or raced.sequence != stored.sequence:
                    raise JournalUnavailable(f"removing {runner} raced another change: try again")
                return (raced, False), False
            # The drain goes with the member (M1): a later member of the name
            # starts undrained.
            cursor.execute(undrain, {"runner": runner})
            return (stored, True), True

        result: tuple[MembershipRecord, bool] = await self._write(work)
        return result

    async def runner_roster(self) -> RunnerRoster:
        sql = self._sql
        latest = sql.dialect.sql(
            f"SELECT {_COLUMNS} FROM runner_membership m WHERE m.sequence ="
            " (SELECT max(sequence) FROM runner_membership i WHERE i.runner = m.runner)"
            " ORDER BY m.runner"
        )
        drains = sql.dialect.sql(
            "SELECT runner, drained_by, reason, drained_at FROM runner_drains ORDER BY runner"
        )

        def work(cursor: Cursor) -> RunnerRoster:
            cursor.execute(latest, {})
            records = tuple(self._member(row) for row in cursor.fetchall())
            cursor.execute(drains, {})
            return RunnerRoster(records, tuple(self._drain(row) for row in cursor.fetchall()))

        roster: RunnerRoster = await self._read(work)
        return roster

    async def bound_turns(self) -> dict[str, int]:
        def work(cursor: Cursor) -> dict[str, int]:
            return self._bound_in(cursor, None)

        found: dict[str, int] = await self._read(work)
        return found
