"""Starting an attempt (C4, C5), giving up (C8, max_attempts) and the replay
policies (§3).

Every Dispatch, first or replay, goes through :func:`write_ahead`: the
attempt row and the DISPATCHING state are committed before the Dispatch
command is performed, and ``max_attempts`` bounds every policy.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from coordinator_svc.core.commands import Dispatch
from coordinator_svc.core.decision import (
    Context,
    Decision,
    all_refused,
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
from coordinator_svc.core.truth import Evidence, joined_execution


def may_send_again(record: OperationRecord, ctx: Context) -> bool:
    """NEVER_AUTOMATIC: no new attempt once one may have been delivered."""
    if record.replay_policy is not ReplayPolicy.NEVER_AUTOMATIC:
        return True
    return all_refused(ctx.attempts)


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
    if number > record.max_attempts:
        return end(
            record,
            ctx,
            OpState.TIMED_OUT,
            "MAX_ATTEMPTS_EXCEEDED",
            f"attempt {number} would exceed max_attempts={record.max_attempts}",
        )
    if not may_send_again(record, ctx):
        return end(
            record,
            ctx,
            OpState.TIMED_OUT,
            "MAX_ATTEMPTS_EXCEEDED",
            "replay policy NEVER_AUTOMATIC: no replay after the first send",
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
    command = Dispatch(runner, number, incarnation_id, record.fencing_token)
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
    **fields: Any,
) -> Decision:
    """A terminal outcome the coordinator concludes itself (no runner row to
    adopt): its execution is the C14 join, nothing to release."""
    attempts = with_updates(ctx.attempts, updates)
    execution = joined_execution(record, attempts, evidence)
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
