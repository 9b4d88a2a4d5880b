"""Executor process groups in the runner store (R10: executors never outlive their runner).

The incarnation that launches an executor records its process group at
launch (fenced like every write, §6); the next incarnation's sweep
(runner_svc/executor_sweep.py) reads what earlier ones left open, ends it,
and writes ``ended_at`` before it serves. A record whose operation row is
settled needs no look at the OS: a turn settles only after its executor's
group was killed and its leader reaped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from runner_svc.core.model import SETTLED_STATES, RowState
from runner_svc.storage.store_errors import StoreFencedError, StoreReadError, StoreWriteError
from runner_svc.storage.tables import executor_processes, operations, store_meta

SETTLED_BEFORE_RESTART = "its turn settled (group killed, leader reaped) before its runner ended"


@dataclass(frozen=True)
class RecordedExecutor:
    record_id: int
    operation_id: str
    incarnation_id: str
    pgid: int
    start_time: int
    boot_id: str
    launched_at: float
    operation_state: RowState | None  # the operation's stored row state now


class ExecutorRecords:
    """The executor records of one store, as one incarnation sees and writes them."""

    def __init__(self, engine: sa.Engine, path: Path, incarnation_id: str) -> None:
        self._engine = engine
        self._path = path
        self.incarnation_id = incarnation_id

    def record(
        self, operation_id: str, pgid: int, start_time: int, boot_id: str, at: float
    ) -> None:
        values = {
            "operation_id": operation_id,
            "incarnation_id": self.incarnation_id,
            "pgid": pgid,
            "start_time": start_time,
            "boot_id": boot_id,
            "launched_at": at,
        }
        self._write(executor_processes.insert().values(**values))

    def close_settled(self, at: float) -> None:
        """End the open records of earlier incarnations whose turn has settled."""
        settled = sa.select(operations.c.operation_id).where(
            operations.c.state.in_([state.value for state in SETTLED_STATES])
        )
        self._write(
            executor_processes.update()
            .where(
                executor_processes.c.ended_at.is_(None),
                executor_processes.c.incarnation_id != self.incarnation_id,
                executor_processes.c.operation_id.in_(settled),
            )
            .values(ended_at=at, ended_how=SETTLED_BEFORE_RESTART)
        )

    def left_open(self) -> list[RecordedExecutor]:
        """Earlier incarnations' records not known to be over, oldest first."""
        query = (
            sa.select(executor_processes, operations.c.state)
            .outerjoin(operations, operations.c.operation_id == executor_processes.c.operation_id)
            .where(
                executor_processes.c.ended_at.is_(None),
                executor_processes.c.incarnation_id != self.incarnation_id,
            )
            .order_by(executor_processes.c.id)
        )
        try:
            with self._engine.connect() as conn:
                rows = list(conn.execute(query).mappings())
        except sa.exc.SQLAlchemyError as exc:
            raise StoreReadError(f"cannot read runner store {self._path}: {exc}") from exc
        return [
            RecordedExecutor(
                record_id=int(row["id"]),
                operation_id=str(row["operation_id"]),
                incarnation_id=str(row["incarnation_id"]),
                pgid=int(row["pgid"]),
                start_time=int(row["start_time"]),
                boot_id=str(row["boot_id"]),
                launched_at=float(row["launched_at"]),
                operation_state=RowState(row["state"]) if row["state"] else None,
            )
            for row in rows
        ]

    def mark_ended(self, record_id: int, how: str, at: float) -> None:
        self._write(
            executor_processes.update()
            .where(executor_processes.c.id == record_id)
            .values(ended_at=at, ended_how=how)
        )

    def _write(self, statement: sa.Executable) -> None:
        """One fenced transaction: only the store's owner writes (§6)."""
        try:
            with self._engine.begin() as conn:
                owner = conn.execute(sa.select(store_meta.c.owner_incarnation_id)).scalar_one()
                if owner != self.incarnation_id:
                    raise StoreFencedError(
                        f"runner store {self._path} is owned by incarnation {owner}; "
                        f"{self.incarnation_id} may not write"
                    )
                conn.execute(statement)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreWriteError(f"runner store {self._path}: write failed: {exc}") from exc
