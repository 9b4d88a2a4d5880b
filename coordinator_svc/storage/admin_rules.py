"""The journal's rules for the operator's records (PROTOCOL.md §10), for every adapter.

Pure, like ``rules``: the adapters read the operation (and its verdict) in
the write's own transaction, call these, and store only what passes. The
API checks the same conditions first to answer with a typed error; these
make the journal refuse them too, whoever calls it.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from coordinator_svc.config import RunnerSpecError, runner_endpoint
from coordinator_svc.core.membership import (
    AddOutcome,
    MemberAction,
    MemberRefusal,
    MembershipRecord,
    add_outcome,
    removal_refusal,
    removal_replayed,
    removed,
)
from coordinator_svc.core.model import EventRecord, OperationRecord
from coordinator_svc.core.operator import (
    DrainRecord,
    RequeueRecord,
    VerdictRecord,
    requeue_key_digest,
    requeue_refusal,
    verdict_refusal,
)
from coordinator_svc.ports import InvalidWrite, MembershipRefused
from coordinator_svc.storage import rules

# sequence 1: one verdict per operation (V3); the key leaves room for more.
FIRST_VERDICT = 1


def check_verdict(operation: OperationRecord | None, verdict: VerdictRecord) -> VerdictRecord:
    """The verdict to store (times in UTC), or InvalidWrite."""
    if operation is None:
        raise InvalidWrite(f"no operation {verdict.operation_id} to record a verdict on")
    refusal = verdict_refusal(operation)
    if refusal is not None:
        raise InvalidWrite(
            f"no verdict on {operation.operation_id} ({refusal}): it is "
            f"{operation.state.value}, execution {operation.execution.value}"
        )
    if not verdict.recorded_by or not verdict.reason:
        raise InvalidWrite("a verdict names who recorded it and why")
    return dataclasses.replace(
        verdict, recorded_at=rules.as_utc(verdict.recorded_at, "verdict time")
    )


def check_requeue(
    original: OperationRecord | None,
    verdict: VerdictRecord | None,
    link: RequeueRecord,
    operation: OperationRecord,
    first_event: EventRecord,
) -> tuple[RequeueRecord, OperationRecord, EventRecord]:
    """The link, operation and first event to store, or InvalidWrite."""
    if original is None:
        raise InvalidWrite(f"no operation {link.operation_id} to requeue")
    refusal = requeue_refusal(original, verdict)
    if refusal is not None:
        raise InvalidWrite(
            f"{original.operation_id} may not be requeued ({refusal}): it is "
            f"{original.state.value}, execution {original.execution.value}"
        )
    if link.requeued_as != operation.operation_id or link.operation_id == operation.operation_id:
        raise InvalidWrite("the link must name the original and the new operation")
    if (
        operation.principal != original.principal
        or operation.idempotency_key_digest != requeue_key_digest(original.operation_id)
        or operation.pool != original.pool
        or operation.kind is not original.kind
    ):
        raise InvalidWrite("a requeued operation keeps the original's principal, pool and kind")
    stored, event = rules.prepare_submit(operation, first_event)
    return (
        dataclasses.replace(link, requeued_at=rules.as_utc(link.requeued_at, "requeue time")),
        stored,
        event,
    )


def check_drain(record: DrainRecord) -> DrainRecord:
    if not record.runner or not record.drained_by or not record.reason:
        raise InvalidWrite("a drain names the runner, who drained it and why")
    return dataclasses.replace(record, drained_at=rules.as_utc(record.drained_at, "drain time"))


# --- runner membership (§11) -----------------------------------------------------


def check_add(latest: MembershipRecord | None, record: MembershipRecord) -> MembershipRecord | None:
    """M2: the ADDED record to store after the name's ``latest`` (its next
    sequence, time in UTC), or None for a replay; MembershipRefused otherwise."""
    if record.action is not MemberAction.ADDED or not record.recorded_by:
        raise InvalidWrite("an added member is an ADDED record naming who added it")
    try:
        runner_endpoint(record.runner, record.address, record.pool, record.kinds)
    except RunnerSpecError as exc:
        raise InvalidWrite(str(exc)) from exc
    outcome = add_outcome(latest, record.endpoint)
    if outcome is AddOutcome.REPLAY:
        return None
    if isinstance(outcome, MemberRefusal):
        raise MembershipRefused(outcome, record.runner, member=latest)
    return dataclasses.replace(
        record,
        sequence=latest.sequence + 1 if latest is not None else 1,
        recorded_at=rules.as_utc(record.recorded_at, "membership time"),
        forced=False,
        bound_turns=0,
    )


def check_removal(
    runner: str,
    latest: MembershipRecord | None,
    *,
    generation: int,
    drained: bool,
    bound: int,
    by: str,
    reason: str,
    at: datetime,
    force: bool,
) -> MembershipRecord | None:
    """M3/M4: the REMOVED record to store, or None when ``latest`` already is the
    removal asked for (a replay); MembershipRefused otherwise."""
    if removal_replayed(latest, generation):
        return None
    if not by or not reason:
        raise InvalidWrite("a removal names who removed the runner and why")
    refusal = removal_refusal(
        latest, generation=generation, drained=drained, bound=bound, force=force
    )
    if refusal is not None or latest is None:
        raise MembershipRefused(
            refusal or MemberRefusal.RUNNER_NOT_FOUND, runner, member=latest, turns=bound
        )
    return removed(
        latest, by, reason, rules.as_utc(at, "membership time"), forced=force, bound=bound
    )
