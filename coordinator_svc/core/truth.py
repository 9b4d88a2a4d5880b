"""Execution truth (C14): did an executor start for this operation?

Joined across attempts, in the order STARTED > UNKNOWN > NOT_STARTED:

- STARTED as soon as any runner confirmed a start (R3), whatever came later.
- Otherwise UNKNOWN while any attempt that was not definitely refused is not
  *covered* by a runner row that speaks for it: a row on the incarnation the
  attempt was bound to, or (§6) a row in the same durable store.
- NOT_STARTED only when no attempt was sent, every attempt was refused, or
  the covering row is settled and says so (a tombstone, a never-launched row
  settled as cancelled). Absence never proves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator_svc.core.model import (
    AttemptOutcome,
    AttemptRecord,
    Execution,
    OperationRecord,
)


@dataclass(frozen=True)
class Evidence:
    """What one runner row says about execution, and which attempts it covers."""

    execution: Execution
    incarnation_id: str
    # Set only when the answer came from a durable store (§6): then the row
    # also speaks for attempts sent to earlier incarnations on that store.
    store_id: str = ""

    def covers(self, attempt: AttemptRecord) -> bool:
        if attempt.incarnation_id == self.incarnation_id:
            return True
        return bool(self.store_id) and attempt.store_id == self.store_id


def joined_execution(
    record: OperationRecord,
    attempts: tuple[AttemptRecord, ...],
    evidence: Evidence | None,
) -> Execution:
    """The operation's execution truth after this decision (C14)."""
    if record.execution is Execution.STARTED:
        return Execution.STARTED
    if evidence is not None and evidence.execution is Execution.STARTED:
        return Execution.STARTED
    unresolved = [
        a
        for a in attempts
        if a.outcome is not AttemptOutcome.REFUSED and (evidence is None or not evidence.covers(a))
    ]
    if unresolved:
        return Execution.UNKNOWN
    if evidence is None:
        return Execution.NOT_STARTED
    return evidence.execution
