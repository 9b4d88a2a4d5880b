"""A turn's retry policy and its executions, as plain values (PROTOCOL.md R15).

``TurnRetry`` is what a client submits (``client.submit(..., retry=TurnRetry(2))``):
the runner may run the executor again only after a failure whose executor
declared effect NONE. ``ExecutionRecord`` is one execution as the coordinator
reports it (``Operation.executions``): a client can always see how many ran
(``Operation.execution_count``, each possibly billed) and why each retry ran.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from google.protobuf import duration_pb2, timestamp_pb2

from turnwire import retry_policy
from turnwire.common.v1 import turn_pb2
from turnwire.vocabulary import DeclaredEffect
from turnwire.wire_values import utc_datetime


@dataclass(frozen=True)
class TurnRetry:
    """How many times the runner may run the executor again after a failure that
    declared effect NONE (``RetryableNoEffect``), and how long it waits between
    (``initial_backoff`` * ``multiplier`` ** n, capped at ``max_backoff``; at
    least the executor's ``retry_after``). Seconds; bounds in
    ``turnwire.retry_policy`` (max_retries 0..10), checked by the coordinator."""

    max_retries: int
    initial_backoff: float = retry_policy.DEFAULT_INITIAL_BACKOFF
    max_backoff: float = retry_policy.DEFAULT_MAX_BACKOFF
    multiplier: float = retry_policy.DEFAULT_MULTIPLIER

    def to_proto(self) -> turn_pb2.RetryPolicy:
        return turn_pb2.RetryPolicy(
            max_retries=self.max_retries,
            initial_backoff=_duration(self.initial_backoff),
            max_backoff=_duration(self.max_backoff),
            backoff_multiplier=self.multiplier,
        )

    @classmethod
    def from_proto(cls, message: turn_pb2.RetryPolicy) -> TurnRetry:
        initial = message.initial_backoff if message.HasField("initial_backoff") else None
        largest = message.max_backoff if message.HasField("max_backoff") else None
        return cls(
            max_retries=message.max_retries,
            initial_backoff=(
                retry_policy.DEFAULT_INITIAL_BACKOFF if initial is None else _seconds(initial)
            ),
            max_backoff=retry_policy.DEFAULT_MAX_BACKOFF if largest is None else _seconds(largest),
            multiplier=message.backoff_multiplier or retry_policy.DEFAULT_MULTIPLIER,
        )


class ExecutionOutcome(enum.StrEnum):
    """How one execution ended; UNSPECIFIED: not ended (running, or its runner
    ended first)."""

    UNSPECIFIED = "UNSPECIFIED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"


@dataclass(frozen=True)
class ExecutionRecord:
    """One execution of the turn's executor, as the runner recorded it (R15).

    ``execution``: did this execution's executor start ("STARTED", "UNKNOWN"
    with a launch intent alone, "NOT_STARTED"). ``effect``: what a failed one
    declared (None: nothing, unknown). ``retry_reason``: why a retry ran."""

    number: int
    execution: str
    outcome: ExecutionOutcome
    reason: str = ""
    message: str = ""
    effect: DeclaredEffect | None = None
    retry_after: float | None = None
    launched_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    retry_reason: str = ""

    @classmethod
    def from_proto(cls, message: turn_pb2.ExecutionRecord) -> ExecutionRecord:
        effect = turn_pb2.DeclaredEffect.Name(message.effect).removeprefix("DECLARED_EFFECT_")
        outcome = turn_pb2.ExecutionOutcome.Name(message.outcome).removeprefix("EXECUTION_OUTCOME_")
        return cls(
            number=message.number,
            execution=turn_pb2.Execution.Name(message.execution).removeprefix("EXECUTION_"),
            outcome=ExecutionOutcome(outcome),
            reason=message.reason,
            message=message.message,
            effect=DeclaredEffect(effect) if effect in DeclaredEffect.__members__ else None,
            retry_after=(
                _seconds(message.retry_after) if message.HasField("retry_after") else None
            ),
            launched_at=_time(message.launched_at) if message.HasField("launched_at") else None,
            started_at=_time(message.started_at) if message.HasField("started_at") else None,
            ended_at=_time(message.ended_at) if message.HasField("ended_at") else None,
            retry_reason=message.retry_reason,
        )


def _duration(seconds: float) -> duration_pb2.Duration:
    value = duration_pb2.Duration()
    value.FromNanoseconds(round(seconds * 1e9))
    return value


def _seconds(value: duration_pb2.Duration) -> float:
    return value.seconds + value.nanos / 1e9


def _time(value: timestamp_pb2.Timestamp) -> datetime:
    return utc_datetime(value)
