"""What a Dispatch, Cancel or Release does to the store, decided without I/O.

The service (``runner_svc.service``) reads the row under the operation's
lock, asks one of these, performs the writes in order and, for a Cancel,
tells the job; the simulation's runner does the same against its in-memory
store, so both run these rules, not copies of them (issue 9).
"""

from __future__ import annotations

from dataclasses import dataclass

from runner_svc.core.admission import DispatchFacts, check_fencing_token
from runner_svc.core.model import Execution, OperationRow, RowState, StopReason
from runner_svc.core.settlement import first_stop_reason, unlaunched_settlement
from runner_svc.core.transitions import (
    Admit,
    RaiseFencingToken,
    Release,
    RowEvent,
    Settle,
    TakeOver,
    Tombstone,
)


def admission_change(
    facts: DispatchFacts,
    row: OperationRow | None,
    *,
    incarnation_id: str,
    attempt: int,
    dispatch_stamp: int,
    now: float,
    with_intent: bool = False,
) -> RowEvent:
    """R2, §6: the write that admits a Dispatch ``decide_admission`` let in: a new
    row, or this incarnation taking over an earlier one's row; ``with_intent``
    (``Admission.with_intent``): with its launch intent in the same write (R3, R4)."""
    if row is None:
        return Admit(
            facts.operation_id,
            incarnation_id,
            facts.kind,
            facts.envelope_digest,
            attempt,
            facts.fencing_token,
            now,
            dispatch_stamp,
            with_intent,
        )
    return TakeOver(incarnation_id, attempt, facts.fencing_token, now, dispatch_stamp, with_intent)


@dataclass(frozen=True)
class CancelPlan:
    """The writes, in order, and whether this incarnation's job must be told."""

    writes: tuple[RowEvent, ...]
    tell_job: bool
    # What happened, in words the counters and logs use.
    outcome: (
        str  # "tombstoned" | "asked_to_stop" | "settled_unlaunched" | "settled" | "earlier_launch"
    )


def plan_cancel(
    row: OperationRow | None,
    *,
    operation_id: str,
    token: int,
    incarnation_id: str,
    has_job: bool,
    now: float,
) -> CancelPlan:
    """R5, R6, §5 (the caller checked the expected incarnation).

    An unknown id is tombstoned, so no Dispatch for it ever runs here (C8b).
    A higher fencing token is recorded. An unsettled row with a job of ours:
    the job stops itself (the first stop reason wins). One an earlier
    incarnation accepted and nobody launched: settled now, NOT_STARTED. One an
    earlier incarnation launched can no longer run here: left as it is.
    Raises RunnerRefusal STALE_FENCING_TOKEN for a lower token.
    """
    check_fencing_token(row, token)
    if row is None:
        return CancelPlan(
            (Tombstone(operation_id, incarnation_id, token, now),), False, "tombstoned"
        )
    writes: list[RowEvent] = []
    if token > row.fencing_token:
        writes.append(RaiseFencingToken(token))
    if row.settled:
        return CancelPlan(tuple(writes), False, "settled")
    if has_job:
        return CancelPlan(tuple(writes), True, "asked_to_stop")
    if row.state is RowState.ACCEPTED:
        decision = unlaunched_settlement(first_stop_reason(row.stop_reason, StopReason.CANCEL))
        settle = Settle(
            incarnation_id, decision.state, Execution.NOT_STARTED, now, error=decision.error
        )
        return CancelPlan((*writes, settle), False, "settled_unlaunched")
    return CancelPlan(tuple(writes), False, "earlier_launch")


def plan_release(row: OperationRow | None, token: int) -> tuple[bool, RowEvent | None]:
    """R9: (answer, write). A settled, not tombstoned row may drop its result;
    anything else answers False and writes nothing. Raises on a lower token."""
    check_fencing_token(row, token)
    if row is None or not row.settled or row.state is RowState.TOMBSTONED:
        return False, None
    return True, None if row.released else Release()
