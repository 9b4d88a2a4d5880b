"""The operator's records and rules (PROTOCOL.md §10): verdicts, requeues, drains.

Pure: the records the journal keeps beside the operations (never in them:
an operation's recorded state, execution and events are not rewritten by
anything here, V1), and the decisions that say whether an operator's act is
allowed on an operation as the journal has it. The I/O is in
``api.admin_servicer`` and the journal adapters.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from datetime import datetime

from coordinator_svc.core.model import Execution, OperationRecord, OpState


class Verdict(enum.StrEnum):
    EXECUTED = "EXECUTED"
    NOT_EXECUTED = "NOT_EXECUTED"


@dataclass(frozen=True)
class VerdictRecord:
    """One operator verdict (V2): append-only, never updated or deleted."""

    operation_id: str
    verdict: Verdict
    recorded_by: str
    reason: str
    recorded_at: datetime


@dataclass(frozen=True)
class RequeueRecord:
    """The link between an operation and the one an operator made from it (V6)."""

    operation_id: str  # the original
    requeued_as: str  # the new operation
    requeued_by: str
    reason: str
    requeued_at: datetime


@dataclass(frozen=True)
class DrainRecord:
    """A drained runner (V8): present while drained, removed by undrain."""

    runner: str
    drained_by: str
    reason: str
    drained_at: datetime


@dataclass(frozen=True)
class OperatorNotes:
    """What the operator's records say about one operation, for its public view."""

    verdict: VerdictRecord | None = None
    requeued_from: str | None = None
    requeued_as: str | None = None


NO_NOTES = OperatorNotes()


@dataclass(frozen=True)
class OperationFilter:
    """AdminService.ListOperations / ListAmbiguousOperations: all fields ANDed;
    empty means "any"."""

    states: tuple[OpState, ...] = ()
    executions: tuple[Execution, ...] = ()
    principal: str = ""
    runner: str = ""
    pool: str = ""
    # Only operations with no verdict recorded (the ambiguous queue).
    without_verdict: bool = False

    def key(self) -> str:
        """A stable text of the filter: page tokens are bound to it."""
        return "\0".join(
            (
                ",".join(sorted({s.value for s in self.states})),
                ",".join(sorted({e.value for e in self.executions})),
                self.principal,
                self.runner,
                self.pool,
                "undecided" if self.without_verdict else "",
            )
        )

    def matches(self, record: OperationRecord, has_verdict: bool) -> bool:
        """The same filter as the SQL adapters' WHERE clause (the fake journal uses it)."""
        return (
            (not self.states or record.state in self.states)
            and (not self.executions or record.execution in self.executions)
            and (not self.principal or record.principal == self.principal)
            and (not self.runner or record.runner == self.runner)
            and (not self.pool or record.pool == self.pool)
            and not (self.without_verdict and has_verdict)
        )


def ambiguous_filter(*, include_decided: bool, include_open: bool) -> OperationFilter:
    """ListAmbiguousOperations: execution UNKNOWN; by default terminal and undecided."""
    states: tuple[OpState, ...] = ()
    if not include_open:
        states = tuple(sorted((s for s in OpState if s.terminal), key=str))
    return OperationFilter(
        states=states, executions=(Execution.UNKNOWN,), without_verdict=not include_decided
    )


class Refusal(enum.StrEnum):
    """Why an operator's act is refused; the names are ErrorReason strings."""

    OPERATION_NOT_TERMINAL = "OPERATION_NOT_TERMINAL"
    OPERATION_NOT_AMBIGUOUS = "OPERATION_NOT_AMBIGUOUS"
    VERDICT_CONFLICT = "VERDICT_CONFLICT"
    REQUEUE_NOT_ALLOWED = "REQUEUE_NOT_ALLOWED"


def verdict_refusal(record: OperationRecord) -> Refusal | None:
    """V2: a verdict only on a terminal operation whose execution is UNKNOWN."""
    if not record.state.terminal:
        return Refusal.OPERATION_NOT_TERMINAL
    if record.execution is not Execution.UNKNOWN:
        return Refusal.OPERATION_NOT_AMBIGUOUS
    return None


def verdict_outcome(asked: Verdict, first: VerdictRecord) -> Refusal | None:
    """V3: after the journal kept ``first``, asking ``asked`` is a replay when it is
    the same verdict, a conflict when not (the first record stands either way)."""
    return None if first.verdict is asked else Refusal.VERDICT_CONFLICT


def requeue_refusal(record: OperationRecord, verdict: VerdictRecord | None) -> Refusal | None:
    """V5: requeue only what is terminal and proven not run: execution NOT_STARTED
    (C14), or an operator's NOT_EXECUTED verdict on an UNKNOWN one."""
    if not record.state.terminal:
        return Refusal.OPERATION_NOT_TERMINAL
    if record.execution is Execution.NOT_STARTED:
        return None
    if (
        record.execution is Execution.UNKNOWN
        and verdict is not None
        and verdict.verdict is Verdict.NOT_EXECUTED
    ):
        return None
    return Refusal.REQUEUE_NOT_ALLOWED


def requeue_key_digest(original_id: str) -> str:
    """The requeued operation's idempotency key digest: one per original (V6), and
    never one a client's key can make (client digests hash ``principal NUL key``
    with a printable key; this hashes a NUL-led text no such pair produces)."""
    return hashlib.sha256(b"\0turnwire-requeue\0" + original_id.encode("utf-8")).hexdigest()
