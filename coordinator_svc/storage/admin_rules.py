"""The journal's rules for the operator's records (PROTOCOL.md §10), for every adapter.

Pure, like ``rules``: the adapters read the operation (and its verdict) in
the write's own transaction, call these, and store only what passes. The
API checks the same conditions first to answer with a typed error; these
make the journal refuse them too, whoever calls it.
"""

from __future__ import annotations

import dataclasses

from coordinator_svc.core.model import EventRecord, OperationRecord
from coordinator_svc.core.operator import (
    DrainRecord,
    RequeueRecord,
    VerdictRecord,
    requeue_key_digest,
    requeue_refusal,
    verdict_refusal,
)
from coordinator_svc.ports import InvalidWrite
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
