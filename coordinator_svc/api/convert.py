"""Journal records <-> public protos, in one place.

Enums map by name: ``OpState.QUEUED`` <-> ``OPERATION_STATE_QUEUED``,
``Execution.STARTED`` <-> ``EXECUTION_STARTED`` and so on, so adding a value on
both sides needs no code here. ``error_reason``/``error_message`` become a
``TurnError``; the stored result bytes (a serialized ``TurnResult``) become the
``result`` field.
"""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf import timestamp_pb2

from coordinator_svc.core.model import (
    EventRecord,
    Execution,
    OperationRecord,
    OpState,
    ReplayPolicy,
    StopReason,
    TurnKind,
)
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2


def op_state_to_proto(state: OpState) -> coordinator_pb2.OperationState.ValueType:
    return coordinator_pb2.OperationState.Value(f"OPERATION_STATE_{state.value}")


def op_state_from_proto(value: coordinator_pb2.OperationState.ValueType) -> OpState:
    """Raises ValueError for UNSPECIFIED or an unknown number."""
    name = coordinator_pb2.OperationState.Name(value).removeprefix("OPERATION_STATE_")
    return OpState(name)


def execution_to_proto(value: Execution) -> turn_pb2.Execution.ValueType:
    return turn_pb2.Execution.Value(f"EXECUTION_{value.value}")


def stop_reason_to_proto(value: StopReason | None) -> turn_pb2.StopReason.ValueType:
    if value is None:
        return turn_pb2.STOP_REASON_UNSPECIFIED
    return turn_pb2.StopReason.Value(f"STOP_REASON_{value.value}")


def replay_policy_to_proto(value: ReplayPolicy) -> turn_pb2.ReplayPolicy.ValueType:
    return turn_pb2.ReplayPolicy.Value(f"REPLAY_POLICY_{value.value}")


def replay_policy_from_proto(value: turn_pb2.ReplayPolicy.ValueType) -> ReplayPolicy:
    """UNSPECIFIED means PROBE_FIRST (turn.proto); unknown numbers raise ValueError."""
    if value == turn_pb2.REPLAY_POLICY_UNSPECIFIED:
        return ReplayPolicy.PROBE_FIRST
    return ReplayPolicy(turn_pb2.ReplayPolicy.Name(value).removeprefix("REPLAY_POLICY_"))


def turn_kind_to_proto(value: TurnKind) -> turn_pb2.TurnKind.ValueType:
    return turn_pb2.TurnKind.Value(f"TURN_KIND_{value.value}")


def turn_kind_from_proto(value: turn_pb2.TurnKind.ValueType) -> TurnKind:
    """Raises ValueError for UNSPECIFIED or an unknown number."""
    return TurnKind(turn_pb2.TurnKind.Name(value).removeprefix("TURN_KIND_"))


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    # A naive datetime from the journal is UTC by convention.
    stamp.FromDatetime(value if value.tzinfo else value.replace(tzinfo=UTC))
    return stamp


def operation_to_proto(record: OperationRecord, waiting_for: str = "") -> coordinator_pb2.Operation:
    """``waiting_for``: the dispatcher's live account of what the operation
    waits for (not stored in the journal; see Operation.waiting_for)."""
    op = coordinator_pb2.Operation(
        waiting_for=waiting_for,
        operation_id=record.operation_id,
        state=op_state_to_proto(record.state),
        execution=execution_to_proto(record.execution),
        attempt_count=record.attempt_count,
        runner=record.runner or "",
        incarnation_id=record.incarnation_id or "",
        stop_reason=stop_reason_to_proto(record.stop_reason),
        replay_policy=replay_policy_to_proto(record.replay_policy),
        kind=turn_kind_to_proto(record.kind),
        max_attempts=record.max_attempts,
        cancel_requested=record.cancel_requested,
        last_event_sequence=record.last_event_sequence,
        pool=record.pool,
        envelope_digest=record.envelope_digest,
    )
    op.created_at.CopyFrom(timestamp(record.created_at))
    op.updated_at.CopyFrom(timestamp(record.updated_at))
    if record.last_attempt_at is not None:
        op.last_attempt_at.CopyFrom(timestamp(record.last_attempt_at))
    if record.finished_at is not None:
        op.finished_at.CopyFrom(timestamp(record.finished_at))
    if record.result is not None:
        op.result.CopyFrom(turn_pb2.TurnResult.FromString(record.result))
    if record.error_reason or record.error_message:
        op.error.CopyFrom(
            turn_pb2.TurnError(reason=record.error_reason or "", message=record.error_message or "")
        )
    return op


def event_to_proto(event: EventRecord) -> coordinator_pb2.OperationEvent:
    proto = coordinator_pb2.OperationEvent(
        operation_id=event.operation_id,
        sequence=event.sequence,
        from_state=(
            op_state_to_proto(event.from_state)
            if event.from_state is not None
            else coordinator_pb2.OPERATION_STATE_UNSPECIFIED
        ),
        to_state=op_state_to_proto(event.to_state),
        execution=execution_to_proto(event.execution),
        reason=event.reason,
        detail=event.detail,
    )
    proto.at.CopyFrom(timestamp(event.at))
    return proto
