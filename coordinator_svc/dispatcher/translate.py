"""Wire (runner_pb2) -> core values. The core never sees generated code."""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.message import DecodeError

from coordinator_svc.core.model import Execution, StopReason, TurnKind
from coordinator_svc.core.routing import executor_name
from coordinator_svc.core.runner_view import RunnerOp, RunnerOpState
from coordinator_svc.core.witness import StoreOpen
from turnwire.common.v1 import turn_pb2
from turnwire.runner.v1 import runner_pb2
from turnwire.wire_values import EnumBridge

_STATES = EnumBridge(RunnerOpState, runner_pb2.RunnerOperationState, "RUNNER_OPERATION_STATE_")
_EXECUTIONS = EnumBridge(Execution, turn_pb2.Execution, "EXECUTION_")
_STOP_REASONS = EnumBridge(StopReason, turn_pb2.StopReason, "STOP_REASON_")


def _state(value: runner_pb2.RunnerOperationState.ValueType) -> RunnerOpState | None:
    # None: UNSPECIFIED or a number this coordinator does not know (a broken contract).
    return _STATES.from_wire.get(value)


def _execution(value: turn_pb2.Execution.ValueType) -> Execution | None:
    return _EXECUTIONS.from_wire.get(value)


def _stop_reason(value: turn_pb2.StopReason.ValueType) -> StopReason | None:
    return _STOP_REASONS.from_wire.get(value)


class RunnerContractViolation(ValueError):
    """A runner reply the contract does not allow (e.g. no row state)."""


def runner_op(op: runner_pb2.RunnerOperation) -> RunnerOp:
    state = _state(op.state)
    if state is None:
        raise RunnerContractViolation(f"row for {op.operation_id} has no state")
    return RunnerOp(
        state=state,
        execution=_execution(op.execution),
        incarnation_id=op.incarnation_id,
        envelope_digest=op.envelope_digest,
        stop_reason=_stop_reason(op.stop_reason),
        result=op.result.SerializeToString(deterministic=True) if op.HasField("result") else None,
        error_reason=op.error.reason if op.HasField("error") else "",
        error_message=op.error.message if op.HasField("error") else "",
        released=op.released,
        executions=(
            turn_pb2.ExecutionLog(executions=op.executions).SerializeToString(deterministic=True)
            if op.executions
            else None
        ),
        execution_count=len(op.executions),
    )


def store_opens(chain: Iterable[runner_pb2.StoreOpen]) -> tuple[StoreOpen, ...]:
    """A status reply's chain of store openings (§6 witness), newest first."""
    return tuple(
        StoreOpen(o.incarnation_id, o.predecessor_incarnation_id, o.predecessor_floor)
        for o in chain
    )


_KINDS = {
    turn_pb2.TURN_KIND_WRITABLE: TurnKind.WRITABLE,
    turn_pb2.TURN_KIND_READ_ONLY: TurnKind.READ_ONLY,
}


def slot_sizes(pools: Iterable[runner_pb2.SlotPool]) -> dict[TurnKind, int]:
    """GetRunnerInfo's pools as sizes per kind (unknown kinds are ignored)."""
    return {_KINDS[p.kind]: int(p.size) for p in pools if p.kind in _KINDS}


def slot_use(pools: Iterable[runner_pb2.SlotPool]) -> dict[TurnKind, int]:
    """The pools' slots in use per kind, as the runner counts them (unknown kinds ignored)."""
    return {_KINDS[p.kind]: int(p.in_use) for p in pools if p.kind in _KINDS}


def envelope_executor(envelope: bytes) -> str:
    """The executor a stored envelope names (R14; empty is ``default``, C6b).
    An envelope that cannot be read names ``default``: routing only, the
    runner's own check (R14) still decides what it serves."""
    try:
        return executor_name(runner_pb2.TurnEnvelope.FromString(envelope).executor)
    except DecodeError:
        return executor_name("")


def runner_executors(executors: Iterable[runner_pb2.ExecutorInfo]) -> tuple[str, ...] | None:
    """GetRunnerInfo's executors by name (C6b); None when it names none (a runner
    from before R14: what it serves is not said)."""
    names = tuple(sorted({e.name for e in executors if e.name}))
    return names or None
