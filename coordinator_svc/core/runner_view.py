"""What a runner says about one operation, free of generated code.

The shell translates ``runner_pb2.RunnerOperation`` into :class:`RunnerOp`;
the decide functions read only this. :func:`observe` is the one table that
maps a runner row to the coordinator state it stands for (PROTOCOL.md §2, R3,
C14):

    ACCEPTED / LAUNCHING / RUNNING      -> RUNNING (not settled)
    SUCCEEDED / FAILED / CANCELLED      -> the same terminal state
    TIMED_OUT                           -> TIMED_OUT (deadline or budget)
    INTERRUPTED                         -> TIMED_OUT, reason INTERRUPTED
    TOMBSTONED                          -> CANCELLED, NOT_STARTED
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator_svc.core.model import Execution, OpState, StopReason
from turnwire.vocabulary import ErrorReason, RunnerOperationState

# The runner's row states (runner.proto), shared with the runner.
RunnerOpState = RunnerOperationState


UNSETTLED_RUNNER_STATES = frozenset(
    {RunnerOpState.ACCEPTED, RunnerOpState.LAUNCHING, RunnerOpState.RUNNING}
)


@dataclass(frozen=True)
class RunnerOp:
    """One operation row as a runner reported it."""

    state: RunnerOpState
    # The execution the runner claims (R3); None when it said nothing.
    execution: Execution | None = None
    # The incarnation that wrote the row's current state.
    incarnation_id: str = ""
    envelope_digest: str = ""
    stop_reason: StopReason | None = None
    result: bytes | None = None
    error_reason: str = ""
    error_message: str = ""
    released: bool = False
    # The row's execution records (R15), a serialized ExecutionLog; None: none.
    executions: bytes | None = None
    execution_count: int = 0

    @property
    def settled(self) -> bool:
        return self.state not in UNSETTLED_RUNNER_STATES


@dataclass(frozen=True)
class Observed:
    """The coordinator state a runner row stands for."""

    state: OpState
    # What the row proves about execution, before joining across attempts
    # (core.truth). NOT_STARTED only from a settled row (C14).
    execution: Execution
    reason: str = ""
    message: str = ""
    result: bytes | None = None
    stop_reason: StopReason | None = None
    executions: bytes | None = None
    execution_count: int = 0


_TERMINAL_MAP = {
    RunnerOpState.SUCCEEDED: OpState.SUCCEEDED,
    RunnerOpState.FAILED: OpState.FAILED,
    RunnerOpState.CANCELLED: OpState.CANCELLED,
    RunnerOpState.TIMED_OUT: OpState.TIMED_OUT,
    RunnerOpState.INTERRUPTED: OpState.TIMED_OUT,
    RunnerOpState.TOMBSTONED: OpState.CANCELLED,
}

_STOP_REASON_TIMEOUTS = {
    StopReason.DEADLINE: ErrorReason.DEADLINE_EXCEEDED,
    StopReason.BUDGET: ErrorReason.BUDGET_EXHAUSTED,
    StopReason.SHUTDOWN: ErrorReason.SHUTDOWN,
    StopReason.CANCEL: ErrorReason.CANCELLED,
    StopReason.HEARTBEAT: ErrorReason.HEARTBEAT_TIMEOUT,
}


def _default_reason(op: RunnerOp) -> str:
    if op.state is RunnerOpState.SUCCEEDED:
        return ""
    if op.state is RunnerOpState.FAILED:
        return ErrorReason.EXECUTOR_FAILED
    if op.state in (RunnerOpState.CANCELLED, RunnerOpState.TOMBSTONED):
        return ErrorReason.CANCELLED
    if op.state is RunnerOpState.INTERRUPTED:
        return ErrorReason.INTERRUPTED
    if op.stop_reason is not None:
        return _STOP_REASON_TIMEOUTS[op.stop_reason]
    return ErrorReason.DEADLINE_EXCEEDED


def _row_execution(op: RunnerOp) -> Execution:
    """What the row proves about this incarnation's execution (R3, C14)."""
    if op.execution is Execution.STARTED or op.state is RunnerOpState.SUCCEEDED:
        return Execution.STARTED  # a success is an execution, whatever else was said
    if op.state is RunnerOpState.TOMBSTONED:
        return Execution.NOT_STARTED
    if op.settled and op.state is not RunnerOpState.INTERRUPTED:
        # A settled row can no longer change: trust what it says it did.
        return op.execution or Execution.UNKNOWN
    # Unsettled (a delayed launch may still come) or interrupted mid-launch.
    return Execution.UNKNOWN


def observe(op: RunnerOp) -> Observed:
    """The coordinator state and execution evidence a runner row stands for."""
    execution = _row_execution(op)
    if not op.settled:
        return Observed(
            OpState.RUNNING,
            execution,
            stop_reason=op.stop_reason,
            executions=op.executions,
            execution_count=op.execution_count,
        )
    if op.state is RunnerOpState.TOMBSTONED:
        return Observed(
            OpState.CANCELLED, Execution.NOT_STARTED, ErrorReason.CANCELLED, "tombstone"
        )
    reason = ErrorReason.INTERRUPTED if op.state is RunnerOpState.INTERRUPTED else op.error_reason
    return Observed(
        _TERMINAL_MAP[op.state],
        execution,
        reason or _default_reason(op),
        op.error_message,
        op.result if op.state is RunnerOpState.SUCCEEDED else None,
        op.stop_reason,
        op.executions,
        op.execution_count,
    )
