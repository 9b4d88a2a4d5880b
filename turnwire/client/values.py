"""What the client SDK hands out and takes in: frozen dataclasses and str enums.

Callers never see a protobuf. Each wire enum is mirrored by name without its
prefix (``OPERATION_STATE_TIMED_OUT`` -> ``OperationState.TIMED_OUT``); a value
this SDK does not know yet (a newer server) reads as ``UNSPECIFIED`` instead
of failing, because a status display must not crash on an added state.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import TypeVar

from google.protobuf import descriptor, timestamp_pb2

from turnwire import vocabulary
from turnwire.client.executions import ExecutionRecord, TurnRetry
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.wire_values import utc_datetime

_EMPTY: Mapping[str, str] = MappingProxyType({})


def _empty() -> Mapping[str, str]:
    return _EMPTY


_E = TypeVar("_E", bound=enum.StrEnum)
_STOP = turn_pb2.StopReason.DESCRIPTOR
_POLICY = turn_pb2.ReplayPolicy.DESCRIPTOR
_KIND = turn_pb2.TurnKind.DESCRIPTOR


class OperationState(enum.StrEnum):
    """The coordinator's view of an operation (PROTOCOL.md §2)."""

    UNSPECIFIED = "UNSPECIFIED"
    QUEUED = "QUEUED"
    DISPATCHING = "DISPATCHING"
    DISPATCH_UNKNOWN = "DISPATCH_UNKNOWN"
    RUNNING = "RUNNING"
    CANCELLING = "CANCELLING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"
    PROTOCOL_ERROR = "PROTOCOL_ERROR"
    REJECTED = "REJECTED"

    @property
    def is_terminal(self) -> bool:
        """No outgoing edge: this state is final and was written once (C10)."""
        return self in _TERMINAL


# The terminal set is the vocabulary's (declared once, PROTOCOL.md §2).
_TERMINAL = frozenset(OperationState(state.value) for state in vocabulary.TERMINAL_STATES)


class Execution(enum.StrEnum):
    """The billing truth: did an executor start for this turn? (§2, C14)."""

    UNSPECIFIED = "UNSPECIFIED"
    NOT_STARTED = "NOT_STARTED"
    STARTED = "STARTED"
    UNKNOWN = "UNKNOWN"


class TurnKind(enum.StrEnum):
    UNSPECIFIED = "UNSPECIFIED"
    WRITABLE = "WRITABLE"
    READ_ONLY = "READ_ONLY"


class ReplayPolicy(enum.StrEnum):
    """What the coordinator may do when it cannot know whether a Dispatch ran."""

    UNSPECIFIED = "UNSPECIFIED"
    PROBE_FIRST = "PROBE_FIRST"
    NEVER_AUTOMATIC = "NEVER_AUTOMATIC"
    SAFE = "SAFE"


class Verdict(enum.StrEnum):
    """An operator's answer to "did it run?" on an UNKNOWN operation (PROTOCOL.md §10)."""

    UNSPECIFIED = "UNSPECIFIED"
    EXECUTED = "EXECUTED"
    NOT_EXECUTED = "NOT_EXECUTED"


class StopReason(enum.StrEnum):
    """Why a turn was asked to stop; the first reason wins (R6)."""

    UNSPECIFIED = "UNSPECIFIED"
    CANCEL = "CANCEL"
    DEADLINE = "DEADLINE"
    BUDGET = "BUDGET"
    SHUTDOWN = "SHUTDOWN"
    HEARTBEAT = "HEARTBEAT"


def _timestamp(message: timestamp_pb2.Timestamp | None) -> datetime | None:
    if message is None or (message.seconds == 0 and message.nanos == 0):
        return None
    return utc_datetime(message)


@dataclass(frozen=True)
class TurnResult:
    """What the executor produced (set when SUCCEEDED)."""

    output: bytes
    content_type: str = ""
    metadata: Mapping[str, str] = field(default_factory=_empty)


@dataclass(frozen=True)
class TurnError:
    """A typed failure: ``reason`` is a stable ErrorReason string."""

    reason: str
    message: str = ""


@dataclass(frozen=True)
class OperatorVerdict:
    """One verdict record (AdminService.RecordVerdict): an audit note beside the
    operation; its recorded state, execution and events stay as they were."""

    verdict: Verdict
    by: str
    reason: str
    at: datetime | None = None

    @classmethod
    def from_proto(cls, message: coordinator_pb2.OperatorVerdict) -> OperatorVerdict:
        return cls(
            verdict=_enum_from_proto(
                Verdict, coordinator_pb2.Verdict.DESCRIPTOR, "VERDICT_", message.verdict
            ),
            by=message.by,
            reason=message.reason,
            at=_timestamp(message.at),
        )


@dataclass(frozen=True)
class Operation:
    """One accepted turn as the coordinator reports it (§7)."""

    operation_id: str
    state: OperationState
    execution: Execution
    attempt_count: int = 0
    last_attempt_at: datetime | None = None
    runner: str = ""
    incarnation_id: str = ""
    stop_reason: StopReason = StopReason.UNSPECIFIED
    result: TurnResult | None = None
    error: TurnError | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    replay_policy: ReplayPolicy = ReplayPolicy.UNSPECIFIED
    kind: TurnKind = TurnKind.UNSPECIFIED
    max_attempts: int = 0
    cancel_requested: bool = False
    last_event_sequence: int = 0
    pool: str = ""
    envelope_digest: str = ""
    # While not terminal: what it waits for right now, in words ("" if nothing).
    waiting_for: str = ""
    # An operator's verdict on an UNKNOWN execution (None if none was recorded).
    verdict: OperatorVerdict | None = None
    # Requeue links (AdminService.RequeueOperation): made from / requeued as.
    requeued_from: str = ""
    requeued_as: str = ""
    # R15: how many executions of the executor ran (each may have been billed),
    # each one's record, the one whose outcome is the result (0: none), and
    # the retry policy the turn was submitted with (None: no retries).
    execution_count: int = 0
    executions: tuple[ExecutionRecord, ...] = ()
    result_execution: int = 0
    retry: TurnRetry | None = None

    @property
    def is_terminal(self) -> bool:
        return self.state.is_terminal

    @property
    def cancel_lost_race(self) -> bool:
        """A cancel was asked for but the turn finished first (C11)."""
        return self.cancel_requested and self.state is OperationState.SUCCEEDED

    @classmethod
    def from_proto(cls, message: coordinator_pb2.Operation) -> Operation:
        return cls(
            operation_id=message.operation_id,
            state=state_from_proto(message.state),
            execution=execution_from_proto(message.execution),
            attempt_count=message.attempt_count,
            last_attempt_at=_timestamp(message.last_attempt_at),
            runner=message.runner,
            incarnation_id=message.incarnation_id,
            stop_reason=_enum_from_proto(StopReason, _STOP, "STOP_REASON_", message.stop_reason),
            result=_result(message),
            error=_error(message),
            created_at=_timestamp(message.created_at),
            updated_at=_timestamp(message.updated_at),
            finished_at=_timestamp(message.finished_at),
            replay_policy=_enum_from_proto(
                ReplayPolicy,
                turn_pb2.ReplayPolicy.DESCRIPTOR,
                "REPLAY_POLICY_",
                message.replay_policy,
            ),
            kind=_enum_from_proto(
                TurnKind, turn_pb2.TurnKind.DESCRIPTOR, "TURN_KIND_", message.kind
            ),
            max_attempts=message.max_attempts,
            cancel_requested=message.cancel_requested,
            last_event_sequence=message.last_event_sequence,
            pool=message.pool,
            envelope_digest=message.envelope_digest,
            waiting_for=message.waiting_for,
            verdict=(
                OperatorVerdict.from_proto(message.verdict) if message.HasField("verdict") else None
            ),
            requeued_from=message.requeued_from,
            requeued_as=message.requeued_as,
            execution_count=message.execution_count,
            executions=tuple(ExecutionRecord.from_proto(e) for e in message.executions),
            result_execution=message.result_execution,
            retry=(
                TurnRetry.from_proto(message.retry_policy)
                if message.HasField("retry_policy")
                else None
            ),
        )


# (our enum, wire prefix) -> {wire number: our member}, built on first use.
_ENUM_TABLES: dict[tuple[type[enum.StrEnum], str], dict[int, enum.StrEnum]] = {}


def _enum_from_proto(
    enum_type: type[_E], wire: descriptor.EnumDescriptor, prefix: str, number: int
) -> _E:
    """A generated enum number -> our enum; unknown numbers read as UNSPECIFIED."""
    table = _ENUM_TABLES.get((enum_type, prefix))
    if table is None:
        table = _ENUM_TABLES[(enum_type, prefix)] = _enum_table(enum_type, wire, prefix)
    found = table.get(number)
    return found if found is not None else enum_type("UNSPECIFIED")  # type: ignore[return-value]


def _enum_table(
    enum_type: type[_E], wire: descriptor.EnumDescriptor, prefix: str
) -> dict[int, enum.StrEnum]:
    table: dict[int, enum.StrEnum] = {}
    for value in wire.values:
        name = value.name.removeprefix(prefix)
        if name in enum_type.__members__:
            table[value.number] = enum_type(name)
    return table


def _result(message: coordinator_pb2.Operation) -> TurnResult | None:
    if not message.HasField("result"):
        return None
    result = message.result
    return TurnResult(
        output=result.output,
        content_type=result.content_type,
        metadata=MappingProxyType(dict(result.metadata)),
    )


def _error(message: coordinator_pb2.Operation) -> TurnError | None:
    if not message.HasField("error") or not message.error.reason:
        return None
    return TurnError(reason=message.error.reason, message=message.error.message)


def state_from_proto(number: int) -> OperationState:
    return _enum_from_proto(
        OperationState, coordinator_pb2.OperationState.DESCRIPTOR, "OPERATION_STATE_", number
    )


def execution_from_proto(number: int) -> Execution:
    return _enum_from_proto(Execution, turn_pb2.Execution.DESCRIPTOR, "EXECUTION_", number)


@dataclass(frozen=True)
class OperationEvent:
    """One transition from the journal's event log (C13), with the operation as of it."""

    operation_id: str
    sequence: int
    from_state: OperationState
    to_state: OperationState
    execution: Execution
    reason: str
    detail: str
    at: datetime | None
    operation: Operation | None = None

    @property
    def is_terminal(self) -> bool:
        return self.to_state.is_terminal

    @classmethod
    def from_proto(
        cls,
        message: coordinator_pb2.WatchOperationResponse | coordinator_pb2.SubmitAndWatchResponse,
    ) -> OperationEvent:
        event = message.event
        return cls(
            operation_id=event.operation_id,
            sequence=event.sequence,
            from_state=state_from_proto(event.from_state),
            to_state=state_from_proto(event.to_state),
            execution=execution_from_proto(event.execution),
            reason=event.reason,
            detail=event.detail,
            at=_timestamp(event.at),
            operation=(
                Operation.from_proto(message.operation) if message.HasField("operation") else None
            ),
        )


@dataclass(frozen=True)
class Submission:
    """What submit returns: the operation, and whether the key was already known.

    Keep ``idempotency_key``: submitting the same turn with it again (after a
    crash, from another process) returns this same operation, never a new one.
    """

    operation: Operation
    replayed: bool
    idempotency_key: str


@dataclass(frozen=True)
class OperationPage:
    """One page of list results; ``next_page_token`` is empty on the last page."""

    operations: tuple[Operation, ...]
    next_page_token: str
