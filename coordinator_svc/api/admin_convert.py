"""The operator's records <-> admin protos (admin.proto, Operation.verdict & links)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from coordinator_svc.api.convert import event_to_proto, timestamp, turn_kind_to_proto
from coordinator_svc.core.membership import MemberAction, MembershipRecord
from coordinator_svc.core.model import (
    AttemptOutcome,
    AttemptRecord,
    EventRecord,
    Execution,
    TurnKind,
)
from coordinator_svc.core.operator import DrainRecord, OperatorNotes, Verdict, VerdictRecord
from coordinator_svc.dispatcher.runner_states import RunnerState
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import admin_pb2, coordinator_pb2
from turnwire.wire_values import EnumBridge

_VERDICTS = EnumBridge(Verdict, coordinator_pb2.Verdict, "VERDICT_")
_OUTCOMES = EnumBridge(AttemptOutcome, admin_pb2.AttemptOutcome, "ATTEMPT_OUTCOME_")
_EXECUTIONS = EnumBridge(Execution, turn_pb2.Execution, "EXECUTION_")
_ACTIONS = EnumBridge(MemberAction, admin_pb2.MembershipAction, "MEMBERSHIP_ACTION_")

# Only a terminal operation with one of these executions can carry a verdict
# (UNKNOWN) or have been requeued (UNKNOWN, NOT_STARTED): others need no lookup.
NOTED_EXECUTIONS = frozenset({Execution.UNKNOWN, Execution.NOT_STARTED})


def verdict_from_proto(value: coordinator_pb2.Verdict.ValueType) -> Verdict:
    """Raises ValueError for UNSPECIFIED or an unknown number."""
    try:
        return _VERDICTS.from_wire[value]
    except KeyError:
        raise ValueError(f"not a verdict: {value}") from None


def executions_from_proto(values: Iterable[turn_pb2.Execution.ValueType]) -> tuple[Execution, ...]:
    """Raises ValueError for UNSPECIFIED or an unknown number."""
    try:
        return tuple(_EXECUTIONS.from_wire[value] for value in values)
    except KeyError:
        raise ValueError("not an execution") from None


def verdict_to_proto(record: VerdictRecord) -> coordinator_pb2.OperatorVerdict:
    return coordinator_pb2.OperatorVerdict(
        verdict=_VERDICTS.to_wire[record.verdict],  # type: ignore[arg-type]
        by=record.recorded_by,
        reason=record.reason,
        at=timestamp(record.recorded_at),
    )


def apply_notes(operation: coordinator_pb2.Operation, notes: OperatorNotes | None) -> None:
    """Show the operator's records on the public Operation (never its state)."""
    if notes is None:
        return
    if notes.verdict is not None:
        operation.verdict.CopyFrom(verdict_to_proto(notes.verdict))
    operation.requeued_from = notes.requeued_from or ""
    operation.requeued_as = notes.requeued_as or ""


def apply_all(
    operations: Iterable[coordinator_pb2.Operation], notes: Mapping[str, OperatorNotes]
) -> None:
    for operation in operations:
        apply_notes(operation, notes.get(operation.operation_id))


def attempt_to_proto(record: AttemptRecord) -> admin_pb2.Attempt:
    return admin_pb2.Attempt(
        number=record.number,
        runner=record.runner,
        incarnation_id=record.incarnation_id,
        store_id=record.store_id or "",
        sent_at=timestamp(record.sent_at),
        outcome=_OUTCOMES.to_wire[record.outcome],  # type: ignore[arg-type]
        detail=record.detail,
    )


def evidence_to_proto(
    operation: admin_pb2.AdminOperation,
    attempts: Sequence[AttemptRecord],
    events: Sequence[EventRecord],
    verdicts: Sequence[VerdictRecord],
) -> admin_pb2.OperationEvidence:
    return admin_pb2.OperationEvidence(
        operation=operation,
        attempts=[attempt_to_proto(a) for a in attempts],
        events=[event_to_proto(e) for e in events],
        verdicts=[verdict_to_proto(v) for v in verdicts],
    )


def runner_to_proto(
    state: RunnerState,
    drain: DrainRecord | None,
    member: MembershipRecord | None = None,
    bound_turns: int = 0,
) -> admin_pb2.Runner:
    """A member as ListRunners shows it: this process's view (``state``), its drain,
    the journal record that added it (None where no journal keeps the set) and the
    turns bound to it in the journal."""
    runner = admin_pb2.Runner(
        name=state.name,
        address=state.address,
        pools=[state.pool],
        kinds=kinds_to_proto(state.kinds),
        generation=state.generation,
        incarnation_id=state.incarnation_id,
        store_id=state.store_id,
        writable_slots=state.writable_slots,
        read_only_slots=state.read_only_slots,
        writable_in_use=state.writable_in_use,
        read_only_in_use=state.read_only_in_use,
        answering=state.answering,
        health=state.health,
        drained=drain is not None,
        bound_turns=bound_turns,
        executors=state.executors,
    )
    if drain is not None:
        runner.drained_by = drain.drained_by
        runner.drain_reason = drain.reason
        runner.drained_at.CopyFrom(timestamp(drain.drained_at))
    if member is not None:
        runner.added_by = member.recorded_by
        runner.added_reason = member.reason
        runner.added_at.CopyFrom(timestamp(member.recorded_at))
    return runner


def kinds_to_proto(kinds: Iterable[TurnKind]) -> list[turn_pb2.TurnKind.ValueType]:
    return sorted(turn_kind_to_proto(kind) for kind in kinds)


def membership_to_proto(record: MembershipRecord) -> admin_pb2.MembershipRecord:
    message = admin_pb2.MembershipRecord(
        runner=record.runner,
        sequence=record.sequence,
        action=_ACTIONS.to_wire[record.action],  # type: ignore[arg-type]
        address=record.address,
        pool=record.pool,
        kinds=kinds_to_proto(record.kinds),
        recorded_by=record.recorded_by,
        reason=record.reason,
        forced=record.forced,
        bound_turns=record.bound_turns,
    )
    message.recorded_at.CopyFrom(timestamp(record.recorded_at))
    return message
