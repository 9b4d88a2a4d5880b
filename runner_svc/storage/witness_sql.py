"""The store's half of the §6 witness, as statements on an open transaction
(the rules themselves are pure, in runner_svc.core.witness).

Every function here runs inside a write transaction of SqliteRunnerStore
(BEGIN IMMEDIATE), so the floor, the chain and the rows change together.
"""

from __future__ import annotations

import logging
from pathlib import Path

import sqlalchemy as sa

from runner_svc.core.model import OperationRow, RowState
from runner_svc.core.transitions import Admit, LaunchIntent, RowEvent, TakeOver
from runner_svc.core.witness import (
    OPENINGS_KEPT,
    StoreOpening,
    check_admissible,
    digest_of,
    next_floor,
)
from runner_svc.storage.tables import openings, operations, store_meta
from turnwire.ids import new_store_id

log = logging.getLogger("runner_svc.store")


class LaunchBelowFloorError(RuntimeError):
    """A launch of a row whose stamp is below the floor (never happens by the
    floor rule; refused all the same)."""


def checked_store_id(
    conn: sa.Connection, meta: sa.RowMapping, path: Path, identity: str
) -> tuple[str, tuple[int, int]]:
    """The store's id, or a new one when the file is not the one that minted it
    (a copy) or its rows are not the set the runner wrote (an edit): either way
    its absence proofs are void (§6). Also the (count, digest) of its rows."""
    store_id = str(meta["store_id"])
    rows = digest_of(conn.execute(sa.select(operations.c.operation_id)).scalars())
    if meta["file_identity"] != identity:
        old, store_id = store_id, new_store_id()
        log.warning("store %s is a copy of %s: new store_id %s", path, old, store_id)
        return store_id, rows
    if rows != (int(meta["row_count"]), int(meta["row_digest"])):
        old, store_id = store_id, new_store_id()
        log.error(
            "store %s (store_id %s): its rows are not the set this runner wrote (edited by "
            "hand or partly restored); it now has store_id %s, so nothing in it counts as "
            "proof that an earlier Dispatch never arrived",
            path,
            old,
            store_id,
        )
    return store_id, rows


def check_floor(current: OperationRow | None, change: RowEvent, floor: int, op_id: str) -> None:
    """Nothing below the owner's floor is admitted (typed refusal) or launched."""
    if isinstance(change, (Admit, TakeOver)):
        check_admissible(change.dispatch_stamp, floor, op_id)
    elif isinstance(change, LaunchIntent) and current and current.dispatch_stamp < floor:
        raise LaunchBelowFloorError(
            f"{op_id}: launch refused, its stamp {current.dispatch_stamp} is below the "
            f"admission floor {floor}"
        )


def record_opening(
    conn: sa.Connection, incarnation_id: str, predecessor: str, floor: int, now: float
) -> tuple[StoreOpening, ...]:
    """Append this opening to the chain; the chain's newest entries, newest first."""
    conn.execute(
        openings.insert().values(
            incarnation_id=incarnation_id,
            predecessor_incarnation_id=predecessor,
            predecessor_floor=floor,
            opened_at=now,
        )
    )
    chain = conn.execute(
        sa.select(openings).order_by(openings.c.position.desc()).limit(OPENINGS_KEPT)
    ).mappings()
    return tuple(
        StoreOpening(
            str(row["incarnation_id"]),
            str(row["predecessor_incarnation_id"]),
            int(row["predecessor_floor"]),
            float(row["opened_at"]),
        )
        for row in chain
    )


def raise_floor(conn: sa.Connection, incarnation_id: str, current: int, target: int) -> int:
    """The owner's floor moved towards ``target``, held at its launchable rows."""
    launchable = conn.execute(
        sa.select(operations.c.dispatch_stamp).where(
            operations.c.state == RowState.ACCEPTED.value,
            operations.c.incarnation_id == incarnation_id,
            operations.c.stop_reason.is_(None),
        )
    ).scalars()
    floor = next_floor(current, target, (int(stamp) for stamp in launchable))
    if floor != current:
        conn.execute(store_meta.update().values(admission_floor=floor))
    return floor
