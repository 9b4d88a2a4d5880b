"""Adopting a runner row as the operation's state (C3, C8, C9, C10, §6).

Shared by every rule that has read a row it may believe: a preflight answer,
a Dispatch reply, a watch report, a Cancel reply. The caller has already
checked that the row speaks for the bound incarnation (C8a) or for the same
durable store (§6); this module only turns it into a Decision.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from coordinator_svc.core.attempting import attempts_exhausted, end
from coordinator_svc.core.commands import Alarm, Release, ScheduleAt
from coordinator_svc.core.decision import (
    Binding,
    Context,
    Decision,
    ExecutionRecords,
    RecordChanges,
    Started,
    StartedAndRecords,
    bookkeeping,
    close_current,
    nothing,
    settled_stop_reason,
    transition,
    with_updates,
)
from coordinator_svc.core.model import (
    AttemptOutcome,
    AttemptUpdate,
    Execution,
    OperationRecord,
    OpState,
)
from coordinator_svc.core.runner_view import Observed, RunnerOp, RunnerOpState, observe
from coordinator_svc.core.truth import Evidence, joined_execution
from turnwire.vocabulary import ErrorReason

_BEFORE_ACK = (OpState.QUEUED, OpState.DISPATCHING, OpState.DISPATCH_UNKNOWN)


def next_poll(ctx: Context) -> ScheduleAt:
    return ScheduleAt(ctx.now + timedelta(seconds=ctx.status_poll))


def running_poll(record: OperationRecord, ctx: Context) -> datetime:
    """When to poll a turn that is (or becomes) RUNNING: C9a's long wait while a
    live watch follows it and nothing asks it to stop, else ``next_poll``."""
    if ctx.watched_status_poll is not None and not record.cancel_requested:
        return ctx.now + timedelta(seconds=ctx.watched_status_poll)
    return next_poll(ctx).at


def newly_started(record: OperationRecord, execution: Execution) -> Started:
    """The field to write when a row on the bound incarnation shows a start the
    record does not have yet (R3, C14); empty when there is nothing new."""
    if execution is Execution.STARTED and record.execution is not Execution.STARTED:
        return {"execution": Execution.STARTED}
    return {}


def started_fields(record: OperationRecord, op: RunnerOp) -> StartedAndRecords:
    """``newly_started`` for an unsettled row read on the bound incarnation."""
    observed = observe(op)
    return {**newly_started(record, observed.execution), **execution_records(record, observed)}


def started_changes(record: OperationRecord, op: RunnerOp) -> RecordChanges:
    """``started_fields`` as a change a rule adds more fields to."""
    found = started_fields(record, op)
    changes: RecordChanges = {}
    if "execution" in found:
        changes["execution"] = found["execution"]
    if "executions" in found and "execution_count" in found:
        changes["executions"] = found["executions"]
        changes["execution_count"] = found["execution_count"]
    return changes


def execution_records(record: OperationRecord, observed: Observed) -> ExecutionRecords:
    """R15: the runner's execution records, when they differ from the journal's.
    They ride on a write made anyway; a retry that began (more records than the
    journal holds) is written on its own, so a client sees it while it runs."""
    if observed.executions is None or observed.executions == record.executions:
        return {}
    return {"executions": observed.executions, "execution_count": observed.execution_count}


def _retry_began(record: OperationRecord, observed: Observed) -> bool:
    return observed.execution_count > record.execution_count


def _give_up_tombstone(
    record: OperationRecord, ctx: Context, incarnation_id: str, via: str
) -> Decision:
    """C8b, R5: only a Cancel makes a tombstone, and with no cancel asked for the
    only Cancel is the coordinator's own give-up. Seen on the watch stream or in a
    status answer before (or instead of: a lost reply, a restart) the Cancel's
    reply, it decides what the reply would have: TIMED_OUT with the give-up's
    reason, NOT_STARTED, never a CANCELLED nobody asked for. The give-up came
    from exhausted attempts (C2, NEVER_AUTOMATIC) or else the reconcile deadline."""
    exhausted = attempts_exhausted(record, ctx) is not None
    reason = ErrorReason.MAX_ATTEMPTS_EXCEEDED if exhausted else ErrorReason.RECONCILE_DEADLINE
    detail = (
        f"{via}: tombstoned on {incarnation_id} by the give-up Cancel; "
        "no Dispatch for it ever runs there"
    )
    evidence = Evidence(Execution.NOT_STARTED, incarnation_id)
    return end(record, ctx, OpState.TIMED_OUT, reason, detail, evidence=evidence)


def _give_ups_own(record: OperationRecord, op: RunnerOp) -> bool:
    """The runner's tombstone behind a give-up that ended NOT_STARTED (C8b)."""
    return (
        op.state is RunnerOpState.TOMBSTONED
        and record.state is OpState.TIMED_OUT
        and record.execution is Execution.NOT_STARTED
        and not record.cancel_requested
    )


def terminal_repeat(record: OperationRecord, observed: Observed, op: RunnerOp) -> Decision:
    """C10: a report about an operation already terminal changes nothing.

    Identical: a no-op. Conflicting: a protocol alarm, still no change.
    """
    # A released row no longer carries its result (R9; it may still send an
    # empty one): compare results only when the runner still holds it.
    same = observed.state is record.state and (
        op.released
        or observed.result is None
        or record.result is None
        or observed.result == record.result
    )
    if same or not op.settled or _give_ups_own(record, op):
        return nothing("terminal: repeat report")
    alarm = Alarm(
        "TERMINAL_CONFLICT",
        f"recorded {record.state}/{record.error_reason or '-'}, runner reports {op.state}",
    )
    return Decision(commands=(alarm,), tags=frozenset({"alarm"}), note="terminal conflict")


def terminal_report(
    record: OperationRecord, op: RunnerOp, runner: str, incarnation_id: str
) -> Decision:
    """A row about an operation already terminal (C10), read on ``incarnation_id``.

    Besides the repeat check: a settled row the runner still holds unreleased
    is released now. This heals a Release lost to a crash between the
    terminal commit and the send, or to the network.
    """
    decision = terminal_repeat(record, observe(op), op)
    if op.settled and not op.released and runner == record.runner:
        release = Release(runner, incarnation_id, record.fencing_token)
        return dataclasses.replace(decision, commands=(*decision.commands, release))
    return decision


def release_only(
    record: OperationRecord, op: RunnerOp, runner: str, incarnation_id: str
) -> Decision:
    """Release a settled, unreleased row of a terminal operation; nothing else."""
    ours = not op.envelope_digest or op.envelope_digest == record.envelope_digest
    if op.settled and not op.released and ours and runner == record.runner:
        return nothing("release", Release(runner, incarnation_id, record.fencing_token))
    return nothing("terminal; report from another incarnation")


def adopt(
    record: OperationRecord,
    op: RunnerOp,
    ctx: Context,
    *,
    runner: str,
    incarnation_id: str,
    store_id: str | None = None,
    durable: bool = False,
    via: str,
) -> Decision:
    """Take the runner's row as the truth for this operation."""
    observed = observe(op)
    if record.state.terminal:
        return terminal_report(record, op, runner, incarnation_id)
    if (
        op.state is RunnerOpState.TOMBSTONED
        and not record.cancel_requested
        and record.state is OpState.DISPATCH_UNKNOWN
    ):
        return _give_up_tombstone(record, ctx, incarnation_id, via)
    if op.envelope_digest and op.envelope_digest != record.envelope_digest:
        # R2: the runner knows this id with other bytes; never adopt that row.
        return _envelope_mismatch(record, op, ctx)
    updates: tuple[AttemptUpdate, ...] = ()
    if record.state in (OpState.DISPATCHING, OpState.DISPATCH_UNKNOWN):
        updates = close_current(record, AttemptOutcome.ACCEPTED, via)
    attempts = with_updates(ctx.attempts, updates)
    evidence = Evidence(
        observed.execution, incarnation_id, store_id if durable and store_id else ""
    )
    execution = joined_execution(record, attempts, evidence)
    binding: Binding = {
        "runner": runner,
        "incarnation_id": incarnation_id,
        "acknowledged": True,
    }
    if store_id is not None:
        binding["store_id"] = store_id
    if observed.state is OpState.RUNNING:
        return _adopt_unsettled(record, ctx, execution, binding, updates, via, observed)
    tags = frozenset({"reconciled"}) if record.state is OpState.DISPATCH_UNKNOWN else frozenset()
    change = transition(
        record,
        observed.state,
        ctx,
        reason=observed.reason,
        detail=f"{via}: runner {op.state}",
        attempt_updates=updates,
        execution=execution,
        result=observed.result,
        error_reason=observed.reason or None,
        error_message=observed.message or None,
        stop_reason=settled_stop_reason(observed.state, observed.stop_reason, record.stop_reason),
        released=True,
        **execution_records(record, observed),
        **binding,
    )
    commands = () if op.released else (Release(runner, incarnation_id, record.fencing_token),)
    return Decision(change, commands, tags=tags)


def _adopt_unsettled(
    record: OperationRecord,
    ctx: Context,
    execution: Execution,
    binding: Binding,
    updates: tuple[AttemptUpdate, ...],
    via: str,
    observed: Observed,
) -> Decision:
    records = execution_records(record, observed)
    if record.state not in _BEFORE_ACK:
        # RUNNING / CANCELLING: already acknowledged; keep waiting. After a
        # fallback status poll, push the durable schedule so the due scan
        # does not return this operation again until the next poll. A start
        # the runner confirmed is recorded (R3): on the poll's own write, or
        # on one of its own if nothing else is written (once per operation).
        started = newly_started(record, execution)
        if via == "status":
            running = record.state is OpState.RUNNING
            poll = running_poll(record, ctx) if running else next_poll(ctx).at
            return Decision(bookkeeping(record, ctx, next_action_at=poll, **started, **records))
        if started:
            change = bookkeeping(record, ctx, **started, **records)
            return Decision(change, note="confirmed start recorded")
        if records and _retry_began(record, observed):
            return Decision(bookkeeping(record, ctx, **records), note="retry recorded (R15)")
        return nothing("still running")
    tags = frozenset({"reconciled"}) if record.state is OpState.DISPATCH_UNKNOWN else frozenset()
    change = transition(
        record,
        OpState.RUNNING,
        ctx,
        detail=f"{via}: acknowledged",
        attempt_updates=updates,
        execution=execution,
        next_action_at=running_poll(record, ctx),
        **records,
        **binding,
    )
    # A cancel stored while DISPATCHING is acted on now that the attempt
    # resolved (C11): decide again, which moves to CANCELLING and sends Cancel.
    return Decision(change, again=record.cancel_requested, tags=tags)


def _envelope_mismatch(record: OperationRecord, op: RunnerOp, ctx: Context) -> Decision:
    updates: tuple[AttemptUpdate, ...] = ()
    if record.state in (OpState.DISPATCHING, OpState.DISPATCH_UNKNOWN):
        updates = close_current(record, AttemptOutcome.UNKNOWN, "envelope digest mismatch")
    detail = f"runner row has envelope digest {op.envelope_digest}"
    change = transition(
        record,
        OpState.PROTOCOL_ERROR,
        ctx,
        reason=ErrorReason.ENVELOPE_MISMATCH,
        detail=detail,
        attempt_updates=updates,
        execution=joined_execution(record, with_updates(ctx.attempts, updates), None),
        error_reason=ErrorReason.ENVELOPE_MISMATCH,
        error_message=detail,
        released=True,
    )
    return Decision(
        change, (Alarm(ErrorReason.ENVELOPE_MISMATCH, detail),), tags=frozenset({"alarm"})
    )
