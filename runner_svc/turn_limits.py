"""A turn's limits as the runner's job machine takes them, read off its envelope
(R6: deadline and budget; R12: heartbeat timeout; R15: retry policy). Unset or zero: no limit."""

from __future__ import annotations

from google.protobuf import duration_pb2

from turnwire.retry_policy import MAX_RETRIES, RetryRule, problems, rule
from turnwire.runner.v1 import runner_pb2


def deadline(envelope: runner_pb2.TurnEnvelope) -> float | None:
    limits = envelope.limits
    if not limits.HasField("deadline"):
        return None
    return limits.deadline.seconds + limits.deadline.nanos / 1e9


def budget_seconds(envelope: runner_pb2.TurnEnvelope) -> float | None:
    budget_ms = envelope.limits.budget_ms
    return budget_ms / 1000.0 if budget_ms else None


def heartbeat_seconds(envelope: runner_pb2.TurnEnvelope) -> float | None:
    limits = envelope.limits
    if not limits.HasField("heartbeat_timeout"):
        return None
    seconds = limits.heartbeat_timeout.seconds + limits.heartbeat_timeout.nanos / 1e9
    return seconds if seconds > 0 else None


def retry_rule(envelope: runner_pb2.TurnEnvelope) -> RetryRule | None:
    """The turn's retry policy (R15); None when it has none or allows no retry.
    The coordinator checked it at submit; a value out of bounds here (an
    envelope from elsewhere) is clamped, never widened."""
    if not envelope.HasField("retry_policy"):
        return None
    wire = envelope.retry_policy
    if wire.max_retries == 0:
        return None
    initial = _seconds(wire.initial_backoff) if wire.HasField("initial_backoff") else None
    largest = _seconds(wire.max_backoff) if wire.HasField("max_backoff") else None
    policy = rule(min(wire.max_retries, MAX_RETRIES), initial, largest, wire.backoff_multiplier)
    if problems(policy.max_retries, policy.initial_backoff, policy.max_backoff, policy.multiplier):
        return None  # not a policy the coordinator would have accepted: no retries
    return policy


def _seconds(duration: duration_pb2.Duration) -> float:
    return duration.seconds + duration.nanos / 1e9
