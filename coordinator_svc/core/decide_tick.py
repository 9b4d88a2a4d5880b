"""Time and restarts: what to do when an operation is due (a Tick), after a
coordinator restart (C12), after a Release, and on a watch report (C9).
"""

from __future__ import annotations

from datetime import timedelta

from coordinator_svc.core.adopt import adopt, release_only, terminal_report
from coordinator_svc.core.attempting import end, give_up, write_ahead
from coordinator_svc.core.commands import Preflight, Release, ScheduleAt
from coordinator_svc.core.decide_cancel import start_cancelling
from coordinator_svc.core.decide_preflight import past_reconcile_deadline
from coordinator_svc.core.decision import (
    Context,
    Decision,
    bookkeeping,
    close_current,
    nothing,
    transition,
)
from coordinator_svc.core.events import RunnerReported, Tick
from coordinator_svc.core.model import AttemptOutcome, Execution, OperationRecord, OpState
from turnwire.vocabulary import ErrorReason


def on_tick(record: OperationRecord, ev: Tick, ctx: Context) -> Decision:
    state = record.state
    if state.terminal:
        return _release_owed(record, ctx)
    if state is OpState.QUEUED:
        return _queued_tick(record, ev, ctx)
    if state is OpState.DISPATCHING:
        abandoned = record.last_attempt_at is not None and ctx.now >= (
            record.last_attempt_at + timedelta(seconds=2 * ctx.dispatch_timeout)
        )
        if abandoned:
            return _dispatch_unknown(record, ctx, "the Dispatch was abandoned without a reply")
        return nothing("a Dispatch is in flight")
    assert record.runner is not None
    if past_reconcile_deadline(record, ctx):
        return give_up(
            record,
            ctx,
            ErrorReason.RECONCILE_DEADLINE,
            "no definite answer before the reconcile deadline",
            runner=record.runner,
            incarnation_id=record.incarnation_id or "",
        )
    if record.cancel_requested and state in (OpState.RUNNING, OpState.DISPATCH_UNKNOWN):
        return start_cancelling(record, ctx)  # C11: a cancel stored while DISPATCHING
    # C8 (DISPATCH_UNKNOWN) or the fallback status poll (RUNNING, CANCELLING).
    return nothing("status check", Preflight(record.runner))


def _queued_tick(record: OperationRecord, ev: Tick, ctx: Context) -> Decision:
    # Issue 9: the coordinator enforces the turn's deadline and its queue
    # timeout on a waiting turn. QUEUED means every attempt was refused, so
    # nothing ran: NOT_STARTED (C14).
    limits = (
        (ctx.turn_deadline, ErrorReason.DEADLINE_EXCEEDED, "the turn's deadline"),
        (ctx.queue_deadline, ErrorReason.QUEUE_TIMEOUT, "the turn's queue timeout"),
    )
    for at, reason, what in limits:
        if at is not None and ctx.now >= at:
            detail = f"{what} ({at.isoformat()}) passed while it waited QUEUED"
            return end(record, ctx, OpState.TIMED_OUT, reason, detail)
    if ev.route is not None:
        known = ev.route_identity
        if known is not None and record.attempt_count == 0:
            # C2a: no Dispatch for it was ever sent (C4: an attempt row comes
            # first), so no runner holds it and a preflight can only say
            # "absent". Bind to the incarnation the watch knows; if the runner
            # has restarted since, C5 refuses the send and C6 applies.
            return write_ahead(
                record,
                ctx,
                runner=ev.route,
                incarnation_id=known.incarnation_id,
                store_id=known.store_id,
                why="first attempt: never sent, so nothing to ask first (C2a)",
            )
        return nothing("route chosen: preflight", Preflight(ev.route))
    # No route: the scheduler holds the turn and grants it a slot when one
    # frees (fair across principals). Look again at the first time limit.
    first = min((at for at, _, _ in limits if at is not None), default=None)
    wake = (ScheduleAt(first),) if first is not None else ()
    return nothing(ev.waiting or "waiting for a free slot", *wake)


def _release_owed(record: OperationRecord, ctx: Context) -> Decision:
    if record.released:
        return nothing("terminal and released")
    if record.runner is None or record.incarnation_id is None:
        return Decision(bookkeeping(record, ctx, released=True))
    release = Release(record.runner, record.incarnation_id, record.fencing_token, record=True)
    return nothing("release the result (C10)", release)


def on_release_done(record: OperationRecord, ctx: Context) -> Decision:
    if not record.state.terminal or record.released:
        return nothing("nothing to record")
    return Decision(bookkeeping(record, ctx, released=True))


def on_restarted(record: OperationRecord, ctx: Context) -> Decision:
    """C12: a Dispatch may have left before the restart: DISPATCH_UNKNOWN."""
    if record.state is not OpState.DISPATCHING:
        return nothing("resumes as is")
    return _dispatch_unknown(record, ctx, "coordinator restarted while DISPATCHING")


def _dispatch_unknown(record: OperationRecord, ctx: Context, detail: str) -> Decision:
    change = transition(
        record,
        OpState.DISPATCH_UNKNOWN,
        ctx,
        detail=detail,
        attempt_updates=close_current(record, AttemptOutcome.UNKNOWN, detail),
        execution=Execution.STARTED if record.execution is Execution.STARTED else Execution.UNKNOWN,
        unknown_since=record.unknown_since or ctx.now,
        next_action_at=ctx.now,
    )
    return Decision(change, tags=frozenset({"ambiguous"}))


def on_reported(record: OperationRecord, ev: RunnerReported, ctx: Context) -> Decision:
    """C9: the watch stream's view of a row."""
    if ev.runner != record.runner:
        return nothing("report from a runner the operation is not bound to")
    if record.state.terminal:
        if ev.incarnation_id != record.incarnation_id:
            # A durable store's later incarnation still holds the settled row:
            # it may drop the result, but its view is not compared (C8a).
            return release_only(record, ev.op, ev.runner, ev.incarnation_id)
        return terminal_report(record, ev.op, ev.runner, ev.incarnation_id)
    if record.state is OpState.QUEUED:
        return nothing("not bound to this runner's row")
    if record.state is OpState.DISPATCHING and not ev.op.settled:
        return nothing("a Dispatch is in flight; its reply decides")
    # A settled row on the bound incarnation is a fast result even while its
    # Dispatch reply is still on the way (DISPATCHING -> terminal); the late
    # reply is then discarded.
    if ev.incarnation_id != record.incarnation_id or ev.op.incarnation_id not in (
        "",
        ev.incarnation_id,
    ):
        # Changed incarnation (C9) or an older incarnation's row (§6): a
        # status answer carries the store identity needed to decide.
        return nothing("incarnation changed: check status", Preflight(ev.runner))
    # CANCELLING and still running: adopt() keeps waiting (and records a
    # confirmed start, R3).
    return adopt(
        record, ev.op, ctx, runner=ev.runner, incarnation_id=ev.incarnation_id, via="watch"
    )
