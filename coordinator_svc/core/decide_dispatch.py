"""Dispatch replies: accepted (C3/R2), typed refusal (C6), anything else (C7).

A reply counts only for the attempt that asked for it while that attempt is
still the one in flight (C8a): a reply for an older attempt, or one arriving
after the operation left DISPATCHING (restart, watch), is discarded.
"""

from __future__ import annotations

from datetime import timedelta

from coordinator_svc.core.adopt import adopt
from coordinator_svc.core.attempting import end
from coordinator_svc.core.decision import (
    STALE_REFUSALS,
    Context,
    Decision,
    all_refused,
    backoff,
    capacity_streak,
    close_current,
    counted_attempts,
    nothing,
    stale_streak,
    transition,
    with_updates,
)
from coordinator_svc.core.events import DispatchAccepted, DispatchRefused, DispatchUnknown
from coordinator_svc.core.model import (
    AttemptOutcome,
    AttemptUpdate,
    Execution,
    OperationRecord,
    OpState,
)
from coordinator_svc.core.stale import read_stale_at
from coordinator_svc.core.truth import Evidence, joined_execution
from turnwire.vocabulary import ErrorReason

# C6: the typed reasons that prove this attempt was not accepted and will not run.
DEFINITE_REFUSALS = frozenset(
    {
        ErrorReason.INCARNATION_MISMATCH,
        ErrorReason.NO_FREE_SLOT,
        ErrorReason.SHUTTING_DOWN,
        ErrorReason.STORE_WRITE_FAILED,
        ErrorReason.STALE_FENCING_TOKEN,
        # §6.1: below the runner's admission floor, never admitted.
        ErrorReason.DISPATCH_STALE,
        # §11 M6: not even sent (its runner is not a member).
        ErrorReason.RUNNER_REMOVED,
        # R14: the runner does not serve the executor the envelope names.
        ErrorReason.EXECUTOR_NOT_SERVED,
    }
)
# Refusals that end the operation.
ENVELOPE_MISMATCH = ErrorReason.ENVELOPE_MISMATCH
ENVELOPE_INVALID = ErrorReason.ENVELOPE_INVALID
CANCELLED_BEFORE_DISPATCH = ErrorReason.CANCELLED_BEFORE_DISPATCH
# Not a runner ErrorReason: the shell's name for a Dispatch over the runner's
# receive limit, refused before any runner code saw it (the coordinator's own
# size check before the send, or gRPC's check on the runner before the
# handler). The same bytes can never be delivered: refused for good.
MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"


def _current(record: OperationRecord, attempt: int) -> bool:
    return record.state is OpState.DISPATCHING and attempt == record.attempt_count


def on_accepted(record: OperationRecord, event: DispatchAccepted, ctx: Context) -> Decision:
    if not _current(record, event.attempt):
        return nothing(f"stale Dispatch reply for attempt {event.attempt}")
    if event.incarnation_id != record.incarnation_id:
        # C8a: a reply from another incarnation is never adopted.
        return unknown(record, ctx, f"reply names incarnation {event.incarnation_id}")
    assert record.runner is not None  # DISPATCHING is always bound (C4)
    return adopt(
        record,
        event.op,
        ctx,
        runner=record.runner,
        incarnation_id=event.incarnation_id,
        via="dispatch duplicate" if event.duplicate else "dispatch",
    )


def on_refused(record: OperationRecord, event: DispatchRefused, ctx: Context) -> Decision:
    if not _current(record, event.attempt):
        return nothing(f"stale Dispatch refusal for attempt {event.attempt}")
    reason = event.reason
    detail = f"{reason}: {event.message}".strip(": ")
    updates = close_current(record, AttemptOutcome.REFUSED, detail)
    if reason == ENVELOPE_MISMATCH:
        return end(record, ctx, OpState.PROTOCOL_ERROR, reason, detail, updates=updates)
    if reason in (ENVELOPE_INVALID, MESSAGE_TOO_LARGE):
        return end(
            record, ctx, OpState.REJECTED, ErrorReason.DISPATCH_REJECTED, detail, updates=updates
        )
    if reason == CANCELLED_BEFORE_DISPATCH:
        # R5: a tombstone on this incarnation: no Dispatch to it ever runs.
        tombstone = Evidence(Execution.NOT_STARTED, record.incarnation_id or "")
        return end(
            record,
            ctx,
            OpState.CANCELLED,
            ErrorReason.CANCELLED,
            detail,
            updates=updates,
            evidence=tombstone,
        )
    if reason not in DEFINITE_REFUSALS:
        return unknown(record, ctx, f"untyped or indefinite refusal {detail}")
    if reason in STALE_REFUSALS:
        # C6c: the attempt keeps what the refusal shows of the clocks (the give-up
        # after a run of them, STALE_STREAK_LIMIT, quotes it).
        sent_at = next((a.sent_at for a in ctx.attempts if a.number == event.attempt), ctx.now)
        said = read_stale_at(sent_at, event.admission_floor, ctx.now).describe(record.runner or "")
        detail = f"{detail}; {said}"
        updates = close_current(record, AttemptOutcome.REFUSED, detail)
    return _definitely_refused(record, ctx, updates, detail)


def _definitely_refused(
    record: OperationRecord,
    ctx: Context,
    attempt_updates: tuple[AttemptUpdate, ...],
    detail: str,
) -> Decision:
    attempts = with_updates(ctx.attempts, attempt_updates)
    if all_refused(attempts):
        if record.cancel_requested:
            # C11: QUEUED with no unresolved attempt is cancelled at once.
            return end(
                record,
                ctx,
                OpState.CANCELLED,
                ErrorReason.CANCELLED,
                f"cancelled; {detail}",
                updates=attempt_updates,
            )
        full, stale = capacity_streak(attempts), stale_streak(attempts)
        if full:
            # Issue 9: the runner is busy, not broken; wait (this does not count).
            waiting = (
                f"waiting for a free {record.kind.value} slot in pool {record.pool} "
                f"({record.runner}: {detail})"
            )
            retry_in = backoff(ctx, full - 1)
        elif stale:
            # C6c: never admitted, nothing ran: a new attempt with a fresh stamp,
            # after a backoff that grows with the run (this does not count).
            waiting = f"attempt {record.attempt_count} refused ({detail}): sent again (C6c)"
            retry_in = backoff(ctx, stale - 1)
        else:
            waiting = f"attempt {record.attempt_count} refused: {detail}"
            retry_in = backoff(ctx, counted_attempts(attempts) - 1)
        change = transition(
            record,
            OpState.QUEUED,
            ctx,
            reason="",
            detail=waiting,
            attempt_updates=attempt_updates,
            runner=None,
            incarnation_id=None,
            store_id=None,
            acknowledged=False,
            execution=Execution.NOT_STARTED,
            next_action_at=ctx.now + retry_in,
        )
        return Decision(change)
    # An earlier attempt may still be in flight or may have run: stay bound
    # and let C8 resolve it.
    full = capacity_streak(attempts)
    if full:
        # Issue 9: bound to a runner that is merely full (C6 forbids moving the
        # turn): wait for it, with backoff. It answered just now, so the
        # reconcile deadline (an unreachable runner) starts again.
        change = transition(
            record,
            OpState.DISPATCH_UNKNOWN,
            ctx,
            detail=(
                f"waiting for a free {record.kind.value} slot in pool {record.pool} on "
                f"{record.runner}, the runner it is bound to ({detail}); an earlier attempt "
                "is unresolved"
            ),
            attempt_updates=attempt_updates,
            execution=joined_execution(record, attempts, None),
            unknown_since=ctx.now,
            next_action_at=ctx.now + backoff(ctx, full - 1),
        )
        return Decision(change, tags=frozenset({"ambiguous"}))
    stale = stale_streak(attempts)
    if stale:
        # C6c, bound: C8 asks the bound runner again, then sends a fresh stamp;
        # after a backoff that grows with the run. The reconcile deadline runs on.
        change = transition(
            record,
            OpState.DISPATCH_UNKNOWN,
            ctx,
            detail=(
                f"attempt {record.attempt_count} refused ({detail}); an earlier one is "
                "unresolved: asked again, then sent again (C6c)"
            ),
            attempt_updates=attempt_updates,
            execution=joined_execution(record, attempts, None),
            unknown_since=record.unknown_since or ctx.now,
            next_action_at=ctx.now + backoff(ctx, stale - 1),
        )
        return Decision(change, tags=frozenset({"ambiguous"}))
    change = transition(
        record,
        OpState.DISPATCH_UNKNOWN,
        ctx,
        detail=f"attempt {record.attempt_count} refused ({detail}); an earlier one is unresolved",
        attempt_updates=attempt_updates,
        execution=joined_execution(record, attempts, None),
        unknown_since=record.unknown_since or ctx.now,
        next_action_at=ctx.now,
    )
    return Decision(change, again=True, tags=frozenset({"ambiguous"}))


def on_unknown(record: OperationRecord, event: DispatchUnknown, ctx: Context) -> Decision:
    if not _current(record, event.attempt):
        return nothing(f"stale Dispatch failure for attempt {event.attempt}")
    return unknown(record, ctx, event.detail)


def unknown(record: OperationRecord, ctx: Context, detail: str) -> Decision:
    """C7: no definite answer; the attempt may have reached the runner."""
    updates = close_current(record, AttemptOutcome.UNKNOWN, detail)
    change = transition(
        record,
        OpState.DISPATCH_UNKNOWN,
        ctx,
        detail=f"attempt {record.attempt_count}: {detail}",
        attempt_updates=updates,
        execution=Execution.STARTED if record.execution is Execution.STARTED else Execution.UNKNOWN,
        unknown_since=record.unknown_since or ctx.now,
        next_action_at=ctx.now + timedelta(seconds=ctx.backoff_initial),
    )
    return Decision(change, again=True, tags=frozenset({"ambiguous"}))
