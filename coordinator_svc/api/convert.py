"""Journal records <-> public protos, in one place.

Enums map by name: ``OpState.QUEUED`` <-> ``OPERATION_STATE_QUEUED``,
``Execution.STARTED`` <-> ``EXECUTION_STARTED`` and so on (tables built once at
import, ``turnwire.wire_values``), so adding a value on both sides needs no
code here. ``error_reason``/``error_message`` become a
``TurnError``; the stored result bytes (a serialized ``TurnResult``) become the
``result`` field.
"""

from __future__ import annotations

from datetime import datetime

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
from turnwire import wire_values
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.runner.v1 import runner_pb2
from turnwire.wire_values import EnumBridge

_STATES = EnumBridge(OpState, coordinator_pb2.OperationState, "OPERATION_STATE_")
_EXECUTIONS = EnumBridge(Execution, turn_pb2.Execution, "EXECUTION_")
_STOP_REASONS = EnumBridge(StopReason, turn_pb2.StopReason, "STOP_REASON_")
_REPLAY_POLICIES = EnumBridge(ReplayPolicy, turn_pb2.ReplayPolicy, "REPLAY_POLICY_")
_KINDS = EnumBridge(TurnKind, turn_pb2.TurnKind, "TURN_KIND_")


def op_state_to_proto(state: OpState) -> coordinator_pb2.OperationState.ValueType:
    return _STATES.to_wire[state]  # type: ignore[return-value]


def op_state_from_proto(value: coordinator_pb2.OperationState.ValueType) -> OpState:
    """Raises ValueError for UNSPECIFIED or an unknown number."""
    try:
        return _STATES.from_wire[value]
    except KeyError:
        raise ValueError(f"not an operation state: {value}") from None


def execution_to_proto(value: Execution) -> turn_pb2.Execution.ValueType:
    return _EXECUTIONS.to_wire[value]  # type: ignore[return-value]


def stop_reason_to_proto(value: StopReason | None) -> turn_pb2.StopReason.ValueType:
    if value is None:
        return turn_pb2.STOP_REASON_UNSPECIFIED
    return _STOP_REASONS.to_wire[value]  # type: ignore[return-value]


def replay_policy_to_proto(value: ReplayPolicy) -> turn_pb2.ReplayPolicy.ValueType:
    return _REPLAY_POLICIES.to_wire[value]  # type: ignore[return-value]


def replay_policy_from_proto(value: turn_pb2.ReplayPolicy.ValueType) -> ReplayPolicy:
    """UNSPECIFIED means PROBE_FIRST (turn.proto); unknown numbers raise ValueError."""
    if value == turn_pb2.REPLAY_POLICY_UNSPECIFIED:
        return ReplayPolicy.PROBE_FIRST
    try:
        return _REPLAY_POLICIES.from_wire[value]
    except KeyError:
        raise ValueError(f"not a replay policy: {value}") from None


def turn_kind_to_proto(value: TurnKind) -> turn_pb2.TurnKind.ValueType:
    return _KINDS.to_wire[value]  # type: ignore[return-value]


def turn_kind_from_proto(value: turn_pb2.TurnKind.ValueType) -> TurnKind:
    """Raises ValueError for UNSPECIFIED or an unknown number."""
    try:
        return _KINDS.from_wire[value]
    except KeyError:
        raise ValueError(f"not a turn kind: {value}") from None


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    # A naive datetime from the journal is UTC by convention (wire_values.timestamp).
    return wire_values.timestamp(value)


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
        created_at=timestamp(record.created_at),
        updated_at=timestamp(record.updated_at),
        last_attempt_at=None
        if record.last_attempt_at is None
        else timestamp(record.last_attempt_at),
        finished_at=None if record.finished_at is None else timestamp(record.finished_at),
    )
    if record.result is not None:
        op.result.MergeFromString(record.result)
    if record.error_reason or record.error_message:
        op.error.CopyFrom(
            turn_pb2.TurnError(reason=record.error_reason or "", message=record.error_message or "")
        )
    _executions_to_proto(record, op)
    return op


def _executions_to_proto(record: OperationRecord, op: coordinator_pb2.Operation) -> None:
    """R15: every execution the runner recorded, how many, which one made the
    result, and the policy the turn was submitted with. A record journaled
    before migration 0008 has no execution records: a STARTED one shows one
    execution."""
    if record.executions:
        op.executions.extend(turn_pb2.ExecutionLog.FromString(record.executions).executions)
    op.execution_count = len(op.executions) or (1 if record.execution is Execution.STARTED else 0)
    last = op.executions[-1] if op.executions else None
    if last is not None and record.state.terminal and last.outcome:
        # The last execution ended the turn when its outcome is the turn's own.
        if _ENDED_BY.get(last.outcome) is record.state:
            op.result_execution = last.number
        if op.HasField("error") and last.effect and last.reason == op.error.reason:
            op.error.effect = last.effect  # what the executor declared (R7)
            if last.HasField("retry_after"):
                op.error.retry_after.CopyFrom(last.retry_after)
    if record.envelope:
        envelope = runner_pb2.TurnEnvelope.FromString(record.envelope)
        if envelope.HasField("retry_policy"):
            op.retry_policy.CopyFrom(envelope.retry_policy)


_ENDED_BY = {
    turn_pb2.EXECUTION_OUTCOME_SUCCEEDED: OpState.SUCCEEDED,
    turn_pb2.EXECUTION_OUTCOME_FAILED: OpState.FAILED,
    turn_pb2.EXECUTION_OUTCOME_CANCELLED: OpState.CANCELLED,
    turn_pb2.EXECUTION_OUTCOME_TIMED_OUT: OpState.TIMED_OUT,
}


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
        at=timestamp(event.at),
    )
    return proto
