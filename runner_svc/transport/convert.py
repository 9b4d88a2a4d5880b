"""Core values -> runner.proto messages."""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from runner_svc.core.model import (
    DeclaredEffect,
    Execution,
    ExecutionRecord,
    RowState,
    SlotKind,
    StopReason,
    TurnFailure,
)
from runner_svc.core.witness import StoreOpening
from runner_svc.service import OperationView, PoolUse, RunnerInfo
from runner_svc.service_output import OutputEnd, OutputGap, OutputItem
from turnwire.common.v1 import turn_pb2
from turnwire.output_stream import Chunk
from turnwire.runner.v1 import runner_pb2

_STATES = {
    state: runner_pb2.RunnerOperationState.Value(f"RUNNER_OPERATION_STATE_{state.value}")
    for state in RowState
}
_EXECUTIONS = {e: turn_pb2.Execution.Value(f"EXECUTION_{e.value}") for e in Execution}
_STOPS = {s: turn_pb2.StopReason.Value(f"STOP_REASON_{s.value}") for s in StopReason}
_EFFECTS = {e: turn_pb2.DeclaredEffect.Value(f"DECLARED_EFFECT_{e.value}") for e in DeclaredEffect}
KINDS = {k: turn_pb2.TurnKind.Value(f"TURN_KIND_{k.value}") for k in SlotKind}


def timestamp(seconds: float | None) -> Timestamp | None:
    if seconds is None:
        return None
    stamp = Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def _error(failure: TurnFailure) -> turn_pb2.TurnError:
    error = turn_pb2.TurnError(reason=failure.reason, message=failure.message)
    if failure.effect is not None:
        error.effect = _EFFECTS[failure.effect]
    if failure.retry_after is not None:
        hint = Duration()
        hint.FromNanoseconds(int(failure.retry_after * 1e9))
        error.retry_after.CopyFrom(hint)
    return error


_OUTCOMES = {
    RowState.SUCCEEDED: turn_pb2.EXECUTION_OUTCOME_SUCCEEDED,
    RowState.FAILED: turn_pb2.EXECUTION_OUTCOME_FAILED,
    RowState.CANCELLED: turn_pb2.EXECUTION_OUTCOME_CANCELLED,
    RowState.TIMED_OUT: turn_pb2.EXECUTION_OUTCOME_TIMED_OUT,
}


def _execution(record: ExecutionRecord, interrupted: bool) -> turn_pb2.ExecutionRecord:
    """One execution (R15). An open one on a row an earlier incarnation left is
    reported as R3 says of its row: STARTED if confirmed, else UNKNOWN."""
    message = turn_pb2.ExecutionRecord(
        number=record.number,
        execution=_EXECUTIONS[record.execution],
        retry_reason=record.retry_reason,
    )
    if record.outcome is not None:
        message.outcome = _OUTCOMES[record.outcome]
    elif interrupted:
        message.reason = "INTERRUPTED"
    if record.error is not None:
        error = _error(record.error)
        message.reason, message.message, message.effect = error.reason, error.message, error.effect
        if error.HasField("retry_after"):
            message.retry_after.CopyFrom(error.retry_after)
    for name, value in (
        ("launched_at", record.launched_at),
        ("started_at", record.started_at),
        ("ended_at", record.ended_at),
    ):
        stamp = timestamp(value)
        if stamp is not None:
            getattr(message, name).CopyFrom(stamp)
    return message


def operation(view: OperationView) -> runner_pb2.RunnerOperation:
    row = view.row
    message = runner_pb2.RunnerOperation(
        operation_id=row.operation_id,
        state=_STATES[row.state],
        execution=_EXECUTIONS[row.execution],
        incarnation_id=row.incarnation_id,
        envelope_digest=row.envelope_digest,
        attempt=row.attempt,
        fencing_token=row.fencing_token,
        released=row.released,
        sequence=row.sequence,
        result_not_saved=view.result_not_saved,
        dispatch_stamp=row.dispatch_stamp,
        output_chunks=row.output_chunks,
    )
    if row.stop_reason is not None:
        message.stop_reason = _STOPS[row.stop_reason]
    if row.result is not None:
        message.result.CopyFrom(
            turn_pb2.TurnResult(
                output=row.result.output,
                content_type=row.result.content_type,
                metadata=dict(row.result.metadata),
            )
        )
    if row.error is not None:
        message.error.CopyFrom(_error(row.error))
    interrupted = row.state is RowState.INTERRUPTED
    message.executions.extend(_execution(record, interrupted) for record in row.executions)
    for name, value in (
        ("accepted_at", row.accepted_at),
        ("started_at", row.started_at),
        ("settled_at", row.settled_at),
    ):
        stamp = timestamp(value)
        if stamp is not None:
            getattr(message, name).CopyFrom(stamp)
    return message


def runner_info(info: RunnerInfo) -> runner_pb2.GetRunnerInfoResponse:
    return runner_pb2.GetRunnerInfoResponse(
        incarnation_id=info.incarnation_id,
        store_id=info.store_id,
        durable=info.durable,
        pools=slot_pools(info.pools),
        accepting=info.accepting,
        started_at=timestamp(info.started_at),
        held_result_not_saved=info.held_result_not_saved,
        version=info.version,
        store_opens=store_opens(info.openings),
        executors=[runner_pb2.ExecutorInfo(name=name, kind=kind) for name, kind in info.executors],
    )


def output_item(item: OutputItem, incarnation_id: str) -> runner_pb2.StreamOutputResponse:
    """One StreamOutput message (R13)."""
    reply = runner_pb2.StreamOutputResponse(incarnation_id=incarnation_id)
    if isinstance(item, Chunk):
        reply.chunk.CopyFrom(
            turn_pb2.OutputChunk(
                offset=item.offset,
                data=item.data,
                content_type=item.content_type,
                emitted_at=timestamp(item.emitted_at),
            )
        )
    elif isinstance(item, OutputGap):
        reply.gap.CopyFrom(
            turn_pb2.OutputGap(after_offset=item.after_offset, next_offset=item.next_offset)
        )
    else:
        assert isinstance(item, OutputEnd)
        reply.end.CopyFrom(
            runner_pb2.OutputEnd(final_offset=item.final_offset, operation=operation(item.view))
        )
    return reply


def slot_pools(pools: Iterable[PoolUse]) -> list[runner_pb2.SlotPool]:
    """Slot pools as GetRunnerInfo and every WatchOperations message report them."""
    return [
        runner_pb2.SlotPool(kind=KINDS[pool.kind], size=pool.size, in_use=pool.in_use)
        for pool in pools
    ]


def store_opens(openings: Iterable[StoreOpening]) -> list[runner_pb2.StoreOpen]:
    """The store's chain of openings (§6 witness), newest first."""
    return [
        runner_pb2.StoreOpen(
            incarnation_id=opening.incarnation_id,
            predecessor_incarnation_id=opening.predecessor_incarnation_id,
            predecessor_floor=opening.predecessor_floor,
            opened_at=timestamp(opening.opened_at),
        )
        for opening in openings
    ]
