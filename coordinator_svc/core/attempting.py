"""Starting an attempt (C4, C5), giving up (C8, max_attempts) and the replay
policies (§3).

Every Dispatch, first or replay, goes through :func:`write_ahead`: the
attempt row and the DISPATCHING state are committed before the Dispatch
command is performed, and ``max_attempts`` bounds every policy.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Unpack

from coordinator_svc.core.commands import Cancel, Dispatch, GiveUp
from coordinator_svc.core.decision import (
    Context,
    Decision,
    StopRequest,
    all_refused,
    counted_attempts,
    nothing,
    settled_stop_reason,
    stale_streak,
    transition,
    with_updates,
)
from coordinator_svc.core.model import (
    AttemptRecord,
    AttemptUpdate,
    Execution,
    OperationRecord,
    OpState,
    ReplayPolicy,
)
from coordinator_svc.core.stale import STALE_STREAK_LIMIT
from coordinator_svc.core.truth import Evidence, joined_execution
from turnwire.ids import dispatch_stamp
from turnwire.vocabulary import ErrorReason


def may_send_again(record: OperationRecord, ctx: Context) -> bool:
    """NEVER_AUTOMATIC: no new attempt once one may have been delivered."""
    if record.replay_policy is not ReplayPolicy.NEVER_AUTOMATIC:
        return True
    return all_refused(ctx.attempts)


def attempts_exhausted(record: OperationRecord, ctx: Context) -> str | None:
    """Why no further attempt may be sent (max_attempts, C6a counting; or
    NEVER_AUTOMATIC after a send), or None if one may."""
    counted = counted_attempts(ctx.attempts) + 1
    if counted > record.max_attempts:
        return (
            f"attempt {record.attempt_count + 1} would exceed max_attempts={record.max_attempts} "
            f"({counted} counted; refusals by a full runner, or of a stale Dispatch, do not "
            "count)"
        )
    if not may_send_again(record, ctx):
        return "replay policy NEVER_AUTOMATIC: no replay after the first send"
    return None


def stale_run_over(ctx: Context) -> str | None:
    """C6c: why no further attempt may be sent after a run of DISPATCH_STALE
    refusals (quoting the last, which says whether the clocks disagree), or None."""
    streak = stale_streak(ctx.attempts)
    if streak < STALE_STREAK_LIMIT:
        return None
    last = max(ctx.attempts, key=lambda a: a.number)
    return (
        f"{streak} Dispatches in a row were refused DISPATCH_STALE, never admitted "
        f"(C6c, at most {STALE_STREAK_LIMIT}); the last: {last.detail}"
    )


def write_ahead(
    record: OperationRecord,
    ctx: Context,
    *,
    runner: str,
    incarnation_id: str,
    store_id: str,
    why: str,
) -> Decision:
    """C4: record attempt n+1 bound to (runner, incarnation), then send it (C5)."""
    number = record.attempt_count + 1
    for reason, exhausted in (
        (ErrorReason.MAX_ATTEMPTS_EXCEEDED, attempts_exhausted(record, ctx)),
        (ErrorReason.DISPATCH_STALE, stale_run_over(ctx)),
    ):
        if exhausted is not None:
            return give_up(
                record, ctx, reason, exhausted, runner=runner, incarnation_id=incarnation_id
            )
    attempt = AttemptRecord(
        operation_id=record.operation_id,
        number=number,
        runner=runner,
        incarnation_id=incarnation_id,
        store_id=store_id or None,
        sent_at=ctx.now,
    )
    change = transition(
        record,
        OpState.DISPATCHING,
        ctx,
        detail=f"attempt {number} -> {runner}/{incarnation_id}: {why}",
        new_attempt=attempt,
        attempt_count=number,
        last_attempt_at=ctx.now,
        runner=runner,
        incarnation_id=incarnation_id,
        store_id=store_id or None,
        acknowledged=False,
        execution=Execution.UNKNOWN,
        # If the send is abandoned without a reply, look again after this.
        next_action_at=ctx.now + timedelta(seconds=2 * ctx.dispatch_timeout),
    )
    command = Dispatch(
        runner, number, incarnation_id, record.fencing_token, dispatch_stamp(attempt.sent_at)
    )
    # A replay re-sends what may already have been delivered; a send after
    # only definite refusals is a fresh first attempt.
    tags = frozenset() if all_refused(ctx.attempts) else frozenset({"replay"})
    return Decision(change, (command,), tags=tags)


def end(
    record: OperationRecord,
    ctx: Context,
    to: OpState,
    reason: str,
    detail: str,
    *,
    updates: tuple[AttemptUpdate, ...] = (),
    evidence: Evidence | None = None,
    **fields: Unpack[StopRequest],
) -> Decision:
    """A terminal outcome the coordinator concludes itself (no runner row to
    adopt): its execution is the C14 join, nothing to release; its stop reason
    only if a stop ended it (R6: a CANCELLED; nothing else was stopped)."""
    attempts = with_updates(ctx.attempts, updates)
    execution = joined_execution(record, attempts, evidence)
    fields["stop_reason"] = settled_stop_reason(
        to, None, fields.pop("stop_reason", record.stop_reason)
    )
    change = transition(
        record,
        to,
        ctx,
        reason=reason,
        detail=detail,
        attempt_updates=updates,
        execution=execution,
        error_reason=reason,
        error_message=detail,
        released=True,
        **fields,
    )
    return Decision(change)


def give_up(
    record: OperationRecord,
    ctx: Context,
    reason: str,
    detail: str,
    *,
    runner: str,
    incarnation_id: str,
) -> Decision:
    """End TIMED_OUT ``reason`` (max_attempts, the reconcile deadline), but first,
    where it can settle the execution, ask for a tombstone (C14, R5).

    If every attempt not definitely refused went to the bound incarnation and
    ``runner`` answers as that incarnation now, a Cancel there either leaves a
    tombstone (no Dispatch for it ever runs there: NOT_STARTED), or finds the
    row, whose state is then the truth (C8). Nothing is written before the
    reply (``core.give_up`` reads it); without one the end is as before.
    """
    if not _tombstone_would_prove(record, ctx, runner, incarnation_id):
        return end(record, ctx, OpState.TIMED_OUT, reason, detail)
    cancel = Cancel(runner, incarnation_id, record.fencing_token, GiveUp(reason, detail))
    return nothing(f"giving up ({reason}): Cancel first; a tombstone proves NOT_STARTED", cancel)


def _tombstone_would_prove(
    record: OperationRecord, ctx: Context, runner: str, incarnation_id: str
) -> bool:
    if record.state not in (OpState.DISPATCH_UNKNOWN, OpState.CANCELLING) or record.acknowledged:
        return False
    if runner != record.runner or not incarnation_id or incarnation_id != record.incarnation_id:
        return False
    if joined_execution(record, ctx.attempts, None) is not Execution.UNKNOWN:
        return False
    tombstone = Evidence(Execution.NOT_STARTED, incarnation_id)
    return joined_execution(record, ctx.attempts, tombstone) is Execution.NOT_STARTED
