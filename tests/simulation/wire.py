"""The wire between the simulated coordinator shell and the runners: calls in
flight, watch reports, and the core events their replies become (what
``coordinator_svc.dispatcher.runner_client`` and ``translate`` do for real).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coordinator_svc.core.decide_dispatch import (
    CANCELLED_BEFORE_DISPATCH,
    DEFINITE_REFUSALS,
    ENVELOPE_INVALID,
    ENVELOPE_MISMATCH,
)
from coordinator_svc.core.decision import Decision
from coordinator_svc.core.events import (
    CancelAnswered,
    CancelFailed,
    DispatchAccepted,
    DispatchRefused,
    DispatchUnknown,
    Event,
    PreflightAnswer,
    PreflightFailed,
    ReleaseDone,
)
from coordinator_svc.core.model import Execution, StopReason
from coordinator_svc.core.runner_view import RunnerOp, RunnerOpState
from coordinator_svc.core.witness import StoreOpen
from coordinator_svc.driver.agenda import Agenda
from runner_svc.core.model import OperationRow
from runner_svc.storage import executions_json
from tests.simulation.sim_runner import (
    CancelReply,
    DispatchReply,
    RefusedReply,
    ReleaseReply,
    StatusReply,
)

DISPATCH_REFUSALS = DEFINITE_REFUSALS | {
    ENVELOPE_MISMATCH,
    ENVELOPE_INVALID,
    CANCELLED_BEFORE_DISPATCH,
}


@dataclass(frozen=True)
class WatchReport:
    """A row change the runner's watch stream carried (C9)."""

    runner: str
    incarnation_id: str
    row: OperationRow


@dataclass
class Call:
    id: int
    operation_id: str
    kind: str
    runner: str
    asked_attempt: int
    deadline: float
    command: Any
    # The record's event sequence and fencing token when the call was made.
    asked_sequence: int = 0
    asked_token: int = 0


def runner_op(row: OperationRow) -> RunnerOp:
    """What ``dispatcher.translate.runner_op`` makes of a row on the wire."""
    return RunnerOp(
        state=RunnerOpState(row.state.value),
        execution=Execution(row.execution.value),
        incarnation_id=row.incarnation_id,
        envelope_digest=row.envelope_digest,
        stop_reason=StopReason(row.stop_reason.value) if row.stop_reason else None,
        result=row.result.output if row.result is not None else None,
        error_reason=row.error.reason if row.error is not None else "",
        error_message=row.error.message if row.error is not None else "",
        released=row.released,
        # R15: the records as the wire carries them (the core only compares bytes).
        executions=(executions_json.dumps(row.executions) or "").encode() or None,
        execution_count=len(row.executions),
    )


def failure_event(call: Call, detail: str, agenda: Agenda) -> Event | None:
    """The event a call abandoned at its deadline becomes (C7, C8)."""
    op = call.operation_id
    if call.kind == "status":
        streak = agenda.failed(op)
        return PreflightFailed(
            call.runner, detail, call.asked_attempt, streak, asked_sequence=call.asked_sequence
        )
    if call.kind == "dispatch":
        return DispatchUnknown(call.command.attempt, detail)
    if call.kind == "cancel":
        streak = agenda.failed(op)
        return CancelFailed(
            call.runner, "", detail=detail, retry_streak=streak, give_up=call.command.give_up
        )
    return None


def reply_event(call: Call, body: Any, agenda: Agenda) -> Event | None:
    """The event a runner reply becomes (what dispatcher.runner_client does); an
    unanswered or refused call counts on the agenda's streak as the engine's
    performer does (a commit, not an answer, ends the streak)."""
    if isinstance(body, RefusedReply):
        return _refusal_event(call, body, agenda)
    if isinstance(body, StatusReply):
        return PreflightAnswer(
            call.runner,
            body.incarnation_id,
            body.store_id,
            body.durable,
            body.present,
            runner_op(body.row) if body.row is not None else None,
            call.asked_attempt,
            asked_sequence=call.asked_sequence,
            store_opens=tuple(
                StoreOpen(o.incarnation_id, o.predecessor_incarnation_id, o.predecessor_floor)
                for o in body.openings
            ),
        )
    if isinstance(body, DispatchReply):
        return DispatchAccepted(
            call.command.attempt, body.incarnation_id, runner_op(body.row), body.duplicate
        )
    if isinstance(body, CancelReply):
        row = runner_op(body.row) if body.row is not None else None
        return CancelAnswered(
            call.runner, body.incarnation_id, row, body.tombstoned, give_up=call.command.give_up
        )
    if isinstance(body, ReleaseReply):
        return ReleaseDone() if call.command.record else None
    raise TypeError(f"unexpected reply {body!r}")


def _refusal_event(call: Call, body: RefusedReply, agenda: Agenda) -> Event | None:
    if call.kind == "dispatch":
        if body.reason in DISPATCH_REFUSALS:
            return DispatchRefused(
                call.command.attempt,
                body.reason,
                body.incarnation_id,
                body.message,
                body.admission_floor,
            )
        return DispatchUnknown(call.command.attempt, f"{body.reason}: {body.message}")
    if call.kind == "cancel":
        return CancelFailed(
            call.runner,
            body.reason,
            body.incarnation_id,
            body.message,
            agenda.failed(call.operation_id),
            give_up=call.command.give_up,
        )
    if call.kind == "status":
        return PreflightFailed(
            call.runner,
            body.reason,
            call.asked_attempt,
            agenda.failed(call.operation_id),
            asked_sequence=call.asked_sequence,
        )
    return None


def summary(decision: Decision) -> str:
    parts = []
    if decision.change is not None:
        after = decision.change.after
        before = decision.change.before
        if after.state != before.state:
            parts.append(f"{before.state}->{after.state}/{after.execution}")
        else:
            parts.append("bookkeeping")
        if decision.change.new_attempt is not None:
            a = decision.change.new_attempt
            parts.append(f"attempt {a.number}->{a.runner}/{a.incarnation_id}")
        for u in decision.change.attempt_updates:
            parts.append(f"close {u.number} {u.outcome}")
        if after.error_reason and after.state.terminal:
            parts.append(after.error_reason)
    parts.extend(type(c).__name__ for c in decision.commands)
    if decision.note:
        parts.append(f"({decision.note})")
    return " ".join(parts) or "nothing"
