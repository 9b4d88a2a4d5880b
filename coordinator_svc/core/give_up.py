"""The reply to a Cancel sent before giving up (``attempting.give_up``; C8, C14, R5).

The coordinator was about to end the operation TIMED_OUT with execution
UNKNOWN (max_attempts, the reconcile deadline). It asked the bound
incarnation for a tombstone first; the reply decides:

    tombstone on the bound incarnation  -> TIMED_OUT (CANCELLED if a cancel was
                                           asked for), NOT_STARTED per the C14 join
    a settled row                       -> adopt it (C8: present on the bound
                                           incarnation); a CANCELLED the give-up
                                           Cancel caused ends TIMED_OUT
    a live row (a delayed Dispatch got  -> CANCELLING, acknowledged: the runner
      there after all)                     stops it and its settlement decides
    no answer, a refusal                -> TIMED_OUT, execution as C14 joins it
                                           (UNKNOWN), exactly as without the Cancel

A reply counts only while the operation still waits for it (C8a): still
DISPATCH_UNKNOWN or an unacknowledged CANCELLING, on the bound incarnation.
"""

from __future__ import annotations

from coordinator_svc.core.adopt import adopt, next_poll, started_fields
from coordinator_svc.core.attempting import end
from coordinator_svc.core.commands import GiveUp
from coordinator_svc.core.decision import (
    Context,
    Decision,
    bookkeeping,
    close_current,
    nothing,
    transition,
    with_updates,
)
from coordinator_svc.core.events import CancelAnswered, CancelFailed
from coordinator_svc.core.model import (
    AttemptOutcome,
    Execution,
    OperationRecord,
    OpState,
    StopReason,
)
from coordinator_svc.core.runner_view import RunnerOp, RunnerOpState, observe
from coordinator_svc.core.truth import Evidence, joined_execution
from turnwire.vocabulary import ErrorReason

_WAITING = (OpState.DISPATCH_UNKNOWN, OpState.CANCELLING)


def _still_waiting(record: OperationRecord) -> bool:
    return record.state in _WAITING and not record.acknowledged


def on_answered(record: OperationRecord, ev: CancelAnswered, ctx: Context) -> Decision:
    give_up = ev.give_up
    assert give_up is not None
    if not _still_waiting(record):
        return nothing(f"give-up Cancel reply while {record.state}: the operation moved on")
    if ev.runner != record.runner or ev.incarnation_id != record.incarnation_id:
        return _end(record, ctx, give_up, f"the Cancel was answered by {ev.incarnation_id}")
    if ev.tombstoned or (ev.op is not None and ev.op.state is RunnerOpState.TOMBSTONED):
        return _tombstoned(record, ev, ctx, give_up)
    op = ev.op
    if op is None:
        return _end(record, ctx, give_up, "the Cancel reply carried no row")
    if op.envelope_digest and op.envelope_digest != record.envelope_digest:
        return _adopt(record, ev, op, ctx)  # R2: adopt() records the mismatch
    if op.settled:
        if _stopped_by_this_cancel(record, op):
            evidence = Evidence(observe(op).execution, ev.incarnation_id)
            why = f"the give-up Cancel stopped it on {ev.incarnation_id} ({op.state})"
            return _end(record, ctx, give_up, why, evidence)
        return _adopt(record, ev, op, ctx)
    return _still_running(record, ev, op, ctx, give_up)


def on_failed(record: OperationRecord, ev: CancelFailed, ctx: Context) -> Decision:
    give_up = ev.give_up
    assert give_up is not None
    if not _still_waiting(record):
        return nothing(f"give-up Cancel failure while {record.state}: the operation moved on")
    why = f"no tombstone: {ev.reason or 'no answer'} {ev.detail}".strip()
    return _end(record, ctx, give_up, why)


def _end(
    record: OperationRecord,
    ctx: Context,
    give_up: GiveUp,
    why: str,
    evidence: Evidence | None = None,
) -> Decision:
    detail = f"{give_up.detail}; {why}"
    return end(record, ctx, OpState.TIMED_OUT, give_up.reason, detail, evidence=evidence)


def _tombstoned(
    record: OperationRecord, ev: CancelAnswered, ctx: Context, give_up: GiveUp
) -> Decision:
    """R5: no Dispatch for this operation ever runs on the bound incarnation."""
    tombstone = Evidence(Execution.NOT_STARTED, ev.incarnation_id)
    why = f"a Cancel tombstoned it on {ev.incarnation_id}"
    if record.cancel_requested:
        # The principal asked to cancel, and it provably never ran.
        detail = f"cancelled; {give_up.detail}; {why}"
        return end(
            record, ctx, OpState.CANCELLED, ErrorReason.CANCELLED, detail, evidence=tombstone
        )
    return _end(record, ctx, give_up, why, tombstone)


def _stopped_by_this_cancel(record: OperationRecord, op: RunnerOp) -> bool:
    """A row cancelled although nobody asked: the give-up Cancel did it."""
    return (
        op.state is RunnerOpState.CANCELLED
        and op.stop_reason is StopReason.CANCEL
        and not record.cancel_requested
    )


def _adopt(record: OperationRecord, ev: CancelAnswered, op: RunnerOp, ctx: Context) -> Decision:
    return adopt(
        record, op, ctx, runner=ev.runner, incarnation_id=ev.incarnation_id, via="give-up cancel"
    )


def _still_running(
    record: OperationRecord, ev: CancelAnswered, op: RunnerOp, ctx: Context, give_up: GiveUp
) -> Decision:
    """The runner has it and is stopping it: no longer ambiguous; its settlement decides."""
    if record.state is OpState.CANCELLING:
        change = bookkeeping(
            record,
            ctx,
            acknowledged=True,
            unknown_since=None,
            next_action_at=next_poll(ctx).at,
            **started_fields(record, op),
        )
        return Decision(change)
    updates = close_current(record, AttemptOutcome.ACCEPTED, "give-up cancel: present")
    evidence = Evidence(observe(op).execution, ev.incarnation_id)
    change = transition(
        record,
        OpState.CANCELLING,
        ctx,
        reason=give_up.reason,
        detail=f"{give_up.detail}; the runner has it after all: stopping it",
        attempt_updates=updates,
        execution=joined_execution(record, with_updates(ctx.attempts, updates), evidence),
        acknowledged=True,
        unknown_since=None,
        next_action_at=next_poll(ctx).at,
    )
    return Decision(change, tags=frozenset({"reconciled"}))
