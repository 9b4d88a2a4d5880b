"""Cancel (C11): the request, and the runner's answers to Cancel.

The first stop reason wins and is stored once. QUEUED (no unresolved attempt)
is cancelled at once, NOT_STARTED. DISPATCHING stores the request; it is
acted on when the attempt resolves. After dispatch a Cancel is sent and the
runner's settlement decides (SUCCEEDED stays SUCCEEDED, with
``cancel_requested`` visible). A Cancel reply counts only for the incarnation
it names (C8a).
"""

from __future__ import annotations

from typing import Unpack

from coordinator_svc.core import give_up
from coordinator_svc.core.adopt import adopt, next_poll, started_changes, terminal_report
from coordinator_svc.core.attempting import end
from coordinator_svc.core.commands import Cancel, Preflight, ScheduleAt
from coordinator_svc.core.decision import (
    Context,
    Decision,
    StopRequest,
    backoff,
    bookkeeping,
    nothing,
    transition,
)
from coordinator_svc.core.events import CancelAnswered, CancelFailed
from coordinator_svc.core.model import OperationRecord, OpState, StopReason
from coordinator_svc.core.runner_view import RunnerOp, RunnerOpState
from turnwire.vocabulary import ErrorReason

_TOMBSTONE = RunnerOp(RunnerOpState.TOMBSTONED)


def on_requested(record: OperationRecord, ctx: Context) -> Decision:
    if record.state.terminal:
        return nothing(f"already {record.state}: cancel has nothing to stop")
    if record.cancel_requested:
        return nothing("cancel already requested (the first stop reason wins)")
    stop: StopRequest = {
        "cancel_requested": True,
        "stop_reason": record.stop_reason or StopReason.CANCEL,
    }
    if record.state is OpState.QUEUED:
        # No unresolved attempt: the C14 join gives NOT_STARTED.
        return end(
            record,
            ctx,
            OpState.CANCELLED,
            ErrorReason.CANCELLED,
            "cancelled before dispatch",
            **stop,
        )
    if record.state is OpState.DISPATCHING:
        return Decision(bookkeeping(record, ctx, **stop))
    if record.state is OpState.CANCELLING:
        return nothing("already cancelling")
    return start_cancelling(record, ctx, **stop)


def mark_requested(record: OperationRecord, ctx: Context) -> Decision:
    """C11 on a replica that does not hold the operation's lease (§5): store the
    request and nothing else; the owner acts on it at its next look (the row
    is due now). No command: only the owner sends. A QUEUED operation has no
    attempt to stop, so it ends here, as on the owner; the compare-and-set
    orders it against the owner's write-ahead (one of the two is refused).
    ``ctx.replica_id`` must be empty: the lease is not this replica's to write."""
    assert not ctx.replica_id, "a cancel mark never writes the lease"
    if record.state.terminal or record.cancel_requested or record.state is OpState.QUEUED:
        return on_requested(record, ctx)
    if record.state is OpState.CANCELLING:
        return nothing("already cancelling")
    stop: StopRequest = {
        "cancel_requested": True,
        "stop_reason": record.stop_reason or StopReason.CANCEL,
    }
    return Decision(bookkeeping(record, ctx, next_action_at=ctx.now, **stop))


def start_cancelling(
    record: OperationRecord, ctx: Context, **fields: Unpack[StopRequest]
) -> Decision:
    """RUNNING / DISPATCH_UNKNOWN -> CANCELLING, then send Cancel to the bound incarnation."""
    assert record.runner is not None and record.incarnation_id is not None
    change = transition(
        record,
        OpState.CANCELLING,
        ctx,
        reason=ErrorReason.CANCELLED,
        detail="cancel requested",
        next_action_at=next_poll(ctx).at,
        **fields,
    )
    cancel = Cancel(record.runner, record.incarnation_id, record.fencing_token)
    return Decision(change, (cancel,))


def on_answered(record: OperationRecord, ev: CancelAnswered, ctx: Context) -> Decision:
    if ev.give_up is not None and not record.state.terminal:
        return give_up.on_answered(record, ev, ctx)
    if record.state.terminal:
        if ev.op is None or ev.incarnation_id != record.incarnation_id:
            return nothing("terminal")
        return terminal_report(record, ev.op, ev.runner, ev.incarnation_id)
    if record.state is not OpState.CANCELLING:
        return nothing(f"Cancel reply while {record.state}")
    if ev.runner != record.runner or ev.incarnation_id != record.incarnation_id:
        # C8a: another incarnation answered; find out by status (C9, §6).
        assert record.runner is not None
        return nothing("Cancel answered by another incarnation", Preflight(record.runner))
    op = _TOMBSTONE if ev.tombstoned else ev.op
    if op is None:
        return nothing("Cancel reply without a row", next_poll(ctx))
    if not op.settled:
        # The bound incarnation has it: acknowledged (no longer ambiguous), and
        # a start it confirmed is recorded (R3).
        fields = started_changes(record, op)
        if not record.acknowledged:
            fields["acknowledged"] = True
            fields["unknown_since"] = None
        if fields:
            fields["next_action_at"] = next_poll(ctx).at
            return Decision(bookkeeping(record, ctx, **fields))
        return nothing("stop requested; waiting for the runner to settle", next_poll(ctx))
    # A tombstone or a settled row on the bound incarnation decides (C11, C14).
    return adopt(record, op, ctx, runner=ev.runner, incarnation_id=ev.incarnation_id, via="cancel")


def on_failed(record: OperationRecord, ev: CancelFailed, ctx: Context) -> Decision:
    if ev.give_up is not None:
        return give_up.on_failed(record, ev, ctx)
    if record.state is not OpState.CANCELLING:
        return nothing(f"Cancel failure while {record.state}")
    assert record.runner is not None
    if ev.reason == ErrorReason.INCARNATION_MISMATCH:
        return nothing("Cancel refused: the runner restarted", Preflight(record.runner))
    retry = ScheduleAt(ctx.now + backoff(ctx, ev.retry_streak))
    return nothing(f"Cancel failed ({ev.reason or 'no answer'}): {ev.detail}", retry)
