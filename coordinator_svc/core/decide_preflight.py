"""Status answers: the preflight (C2, C3), resolving ambiguity (C8, C8a),
tracking (C9) and the durable-store refinement (§6).

The answer is read against the bound runner and incarnation:

    same incarnation, present   -> adopt the row                       (C3, C8)
    same incarnation, absent    -> replay through C4 / disappeared     (C8, C9, C11)
    other incarnation           -> §6 if the same durable store, else
                                   TIMED_OUT INCARNATION_CHANGED        (C8, C9)
    no answer                   -> back off; DISPATCH_UNKNOWN ends at
                                   the reconcile deadline               (C8)
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from coordinator_svc.core.adopt import adopt, next_poll, started_changes, terminal_report
from coordinator_svc.core.attempting import end, give_up, may_send_again, write_ahead
from coordinator_svc.core.commands import Cancel, ScheduleAt
from coordinator_svc.core.decision import (
    Context,
    Decision,
    backoff,
    bookkeeping,
    nothing,
    transition,
)
from coordinator_svc.core.events import PreflightAnswer, PreflightFailed
from coordinator_svc.core.model import OperationRecord, OpState, ReplayPolicy
from coordinator_svc.core.runner_view import RunnerOp, RunnerOpState
from coordinator_svc.core.witness import store_vouches
from turnwire.vocabulary import ErrorReason

DISAPPEARED = ErrorReason.ACKNOWLEDGED_OPERATION_DISAPPEARED
INCARNATION_CHANGED = ErrorReason.INCARNATION_CHANGED


def _asked_before_a_transition(record: OperationRecord, asked_sequence: int | None) -> bool:
    """C8a: a status read taken before the operation's latest transition (say, a
    watch report that acknowledged it meanwhile) says nothing about it now."""
    return asked_sequence is not None and asked_sequence != record.last_event_sequence


def on_answer(record: OperationRecord, ev: PreflightAnswer, ctx: Context) -> Decision:
    if ev.asked_attempt != record.attempt_count:
        return nothing("stale status answer (asked before a later attempt)")
    if _asked_before_a_transition(record, ev.asked_sequence):
        return nothing("stale status answer (asked before the latest transition)")
    ev = _witnessed(ev, ctx)
    if record.state.terminal:
        if ev.op is None or ev.incarnation_id != record.incarnation_id:
            return nothing("terminal")
        return terminal_report(record, ev.op, ev.runner, ev.incarnation_id)
    if record.state is OpState.QUEUED:
        return _queued(record, ev, ctx)
    if record.state is OpState.DISPATCHING:
        return nothing("a Dispatch is in flight; its reply decides")
    if ev.runner != record.runner:
        return nothing(f"answer from {ev.runner}, operation is bound to {record.runner}")
    if ev.incarnation_id == record.incarnation_id:
        return _same_incarnation(record, ev, ctx)
    if ev.durable and ev.store_id and ev.store_id == record.store_id:
        return _same_durable_store(record, ev, ctx)
    return _incarnation_changed(record, ev, ctx)


def _witnessed(ev: PreflightAnswer, ctx: Context) -> PreflightAnswer:
    """§6 witness: a durable store speaks for earlier incarnations' attempts only
    if its chain of openings vouches for every one of them; otherwise its answer
    is read as a non-durable runner's (C8/C9), whatever it says of the past."""
    if not ev.durable:
        return ev
    if store_vouches(
        ctx.attempts,
        incarnation_id=ev.incarnation_id,
        store_id=ev.store_id,
        openings=ev.store_opens,
    ):
        return ev
    return dataclasses.replace(ev, durable=False)


def _live(op: RunnerOp, incarnation_id: str) -> bool:
    """The row may be adopted as is: settled, or written by this incarnation."""
    return op.settled or op.incarnation_id in ("", incarnation_id)


def _interrupted(op: RunnerOp) -> RunnerOp:
    """§6: an older incarnation's unsettled launch can no longer settle."""
    return dataclasses.replace(op, state=RunnerOpState.INTERRUPTED)


def _adopt(record: OperationRecord, ev: PreflightAnswer, op: RunnerOp, ctx: Context) -> Decision:
    return adopt(
        record,
        op,
        ctx,
        runner=ev.runner,
        incarnation_id=ev.incarnation_id,
        store_id=ev.store_id or None,
        durable=ev.durable,
        via="status",
    )


def _queued(record: OperationRecord, ev: PreflightAnswer, ctx: Context) -> Decision:
    op = ev.op
    if ev.present and op is not None and _live(op, ev.incarnation_id):
        return _adopt(record, ev, op, ctx)  # C3: reconcile first, send nothing
    return write_ahead(
        record,
        ctx,
        runner=ev.runner,
        incarnation_id=ev.incarnation_id,
        store_id=ev.store_id,
        why="preflight: absent",
    )


def _same_incarnation(record: OperationRecord, ev: PreflightAnswer, ctx: Context) -> Decision:
    op = ev.op
    if ev.present and op is not None:
        if not _live(op, ev.incarnation_id):
            return _readmit(record, ev, ctx)
        if record.state is OpState.CANCELLING and not op.settled:
            # Still stopping: ask again (idempotent) and poll again later; the
            # bound incarnation has it (acknowledged) and a confirmed start is
            # recorded on the same write (R3).
            fields = started_changes(record, op)
            if not record.acknowledged:
                fields["acknowledged"] = True
                fields["unknown_since"] = None
            fields["next_action_at"] = next_poll(ctx).at
            later = bookkeeping(record, ctx, **fields)
            return Decision(later, (_cancel(record, ev.incarnation_id),))
        return _adopt(record, ev, op, ctx)
    return _absent(record, ev, ctx)


def _cancel(record: OperationRecord, incarnation_id: str) -> Cancel:
    assert record.runner is not None
    return Cancel(record.runner, incarnation_id, record.fencing_token)


def _absent(
    record: OperationRecord, ev: PreflightAnswer, ctx: Context, *, readmitted: bool = False
) -> Decision:
    """Absent on the bound incarnation (or, §6, in its durable store);
    ``readmitted``: a dead incarnation's never-launched row stands for it."""
    if record.acknowledged and not readmitted:
        return end(
            record,
            ctx,
            OpState.PROTOCOL_ERROR,
            DISAPPEARED,
            f"{ev.runner}/{ev.incarnation_id} no longer knows the operation",
        )
    if record.state is OpState.CANCELLING:
        # C11: never acknowledged: Cancel again; the runner tombstones it (R5).
        return nothing("cancelling: absent, tombstone it", _cancel(record, ev.incarnation_id))
    if record.cancel_requested:
        return _to_cancelling(record, ev, ctx)
    # C8: absence on the incarnation the attempt was bound to licenses an
    # exact replay to that incarnation, and nothing else (C8a).
    assert record.runner is not None
    return write_ahead(
        record,
        ctx,
        runner=record.runner,
        incarnation_id=ev.incarnation_id,
        store_id=ev.store_id,
        why="replay: absent on the bound incarnation",
    )


def _to_cancelling(record: OperationRecord, ev: PreflightAnswer, ctx: Context) -> Decision:
    change = transition(
        record, OpState.CANCELLING, ctx, detail="cancel requested", incarnation_id=ev.incarnation_id
    )
    return Decision(change, (_cancel(record, ev.incarnation_id),))


def _readmit(record: OperationRecord, ev: PreflightAnswer, ctx: Context) -> Decision:
    """§6: the durable store holds an older incarnation's row."""
    op = ev.op
    assert op is not None
    if not ev.durable:
        # The store cannot vouch that the older row is its writer's last word.
        return _incarnation_changed(record, ev, ctx)
    if op.state is not RunnerOpState.ACCEPTED:
        return _adopt(record, ev, _interrupted(op), ctx)
    # Accepted, never launched: it may be dispatched again to this incarnation.
    if record.state is OpState.DISPATCH_UNKNOWN:
        return _absent(record, ev, ctx, readmitted=True)
    if record.state is OpState.RUNNING:
        return _back_to_unknown(record, ev, ctx)
    return nothing("cancelling: re-admitted row", _cancel(record, ev.incarnation_id))


def _back_to_unknown(record: OperationRecord, ev: PreflightAnswer, ctx: Context) -> Decision:
    """§6: RUNNING -> DISPATCH_UNKNOWN bound to the new incarnation, then C8."""
    change = transition(
        record,
        OpState.DISPATCH_UNKNOWN,
        ctx,
        detail=f"accepted but never launched; re-admission by {ev.incarnation_id}",
        incarnation_id=ev.incarnation_id,
        store_id=ev.store_id or None,
        acknowledged=False,
        unknown_since=ctx.now,
        next_action_at=ctx.now,
    )
    return Decision(change, again=True, tags=frozenset({"ambiguous"}))


def _same_durable_store(record: OperationRecord, ev: PreflightAnswer, ctx: Context) -> Decision:
    """§6: a new incarnation on the same durable store still knows the past."""
    op = ev.op
    if ev.present and op is not None:
        if op.settled:
            return _adopt(record, ev, op, ctx)
        if _live(op, ev.incarnation_id):
            # Re-admitted by the new incarnation: follow it there (C8 on it).
            if record.state is OpState.RUNNING:
                return _back_to_unknown(record, ev, ctx)
            if record.state is OpState.DISPATCH_UNKNOWN:
                return _adopt(record, ev, op, ctx)
            return _rebound_absent(record, ev, ctx)
        if op.state is not RunnerOpState.ACCEPTED:
            return _adopt(record, ev, _interrupted(op), ctx)
        # Accepted by a dead incarnation, never launched: it may be sent again.
        if record.state is OpState.RUNNING:
            return _back_to_unknown(record, ev, ctx)
        return _rebound_absent(record, ev, ctx)
    if record.acknowledged:
        return _absent(record, ev, ctx)  # the store lost an acknowledged row
    # Absence in the same durable store proves the Dispatch never arrived.
    return _rebound_absent(record, ev, ctx)


def _rebound_absent(record: OperationRecord, ev: PreflightAnswer, ctx: Context) -> Decision:
    """§6: treat as absent on the new incarnation (replay or tombstone there)."""
    if record.state is OpState.CANCELLING:
        change = bookkeeping(
            record, ctx, incarnation_id=ev.incarnation_id, store_id=ev.store_id or None
        )
        return Decision(change, (_cancel(record, ev.incarnation_id),))
    if not may_send_again(record, ctx):
        return end(
            record,
            ctx,
            OpState.TIMED_OUT,
            INCARNATION_CHANGED,
            "NEVER_AUTOMATIC: no replay to the new incarnation",
        )
    return _absent(record, ev, ctx, readmitted=True)


def _incarnation_changed(record: OperationRecord, ev: PreflightAnswer, ctx: Context) -> Decision:
    """C8/C9: the bound incarnation is gone and took its knowledge with it."""
    op = ev.op
    if ev.present and op is not None and ev.store_id and ev.store_id == record.store_id:
        # The same store, which cannot vouch for the past (§6 witness), still
        # shows what happened: a settlement, or a launch that can no longer
        # settle, stays true in every history of the store (a restore loses
        # later writes, never invents earlier ones). Only what the row does
        # *not* show (absence, "never launched") needs the witness.
        if op.settled:
            return _adopt(record, ev, op, ctx)
        if op.state is not RunnerOpState.ACCEPTED and op.incarnation_id != ev.incarnation_id:
            return _adopt(record, ev, _interrupted(op), ctx)
    safe = record.replay_policy is ReplayPolicy.SAFE
    if safe and record.state is OpState.DISPATCH_UNKNOWN and not record.cancel_requested:
        # SAFE: the submitter allowed running more than once (counted).
        assert record.runner is not None
        return write_ahead(
            record,
            ctx,
            runner=record.runner,
            incarnation_id=ev.incarnation_id,
            store_id=ev.store_id,
            why="SAFE replay to a new incarnation",
        )
    return end(
        record,
        ctx,
        OpState.TIMED_OUT,
        INCARNATION_CHANGED,
        f"{ev.runner} is now incarnation {ev.incarnation_id}, was {record.incarnation_id}",
    )


def on_failed(record: OperationRecord, ev: PreflightFailed, ctx: Context) -> Decision:
    """C8: an unreachable runner: stay and back off until the reconcile deadline."""
    if (
        ev.asked_attempt != record.attempt_count
        or record.state.terminal
        or _asked_before_a_transition(record, ev.asked_sequence)
    ):
        return nothing("stale status failure")
    if past_reconcile_deadline(record, ctx):
        return give_up(  # one Cancel first: a tombstone would prove NOT_STARTED (C14)
            record,
            ctx,
            ErrorReason.RECONCILE_DEADLINE,
            f"{ev.runner} unreachable past the reconcile deadline: {ev.detail}",
            runner=ev.runner,
            incarnation_id=record.incarnation_id or "",
        )
    retry = ScheduleAt(ctx.now + backoff(ctx, ev.retry_streak))
    return nothing(f"{ev.runner} unreachable: {ev.detail}", retry)


def past_reconcile_deadline(record: OperationRecord, ctx: Context) -> bool:
    """C8: an unresolved ambiguity (DISPATCH_UNKNOWN, or a CANCELLING the runner
    never acknowledged) has waited for the bound runner longer than allowed."""
    if record.state is OpState.DISPATCH_UNKNOWN:
        since = record.unknown_since or record.updated_at
    elif record.state is OpState.CANCELLING and not record.acknowledged:
        if record.unknown_since is None:
            return False
        since = record.unknown_since
    else:
        return False
    return ctx.now >= since + timedelta(seconds=ctx.reconcile_deadline)
