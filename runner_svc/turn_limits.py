"""A turn's limits as the runner's job machine takes them, read off its envelope
(R6: deadline and budget; R12: heartbeat timeout). Unset or zero: no limit."""

from __future__ import annotations

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
