"""Each waiting turn's own deadline, read once from its envelope (issue 9).

The core enforces it on a QUEUED turn (decide_tick); the shell only reads it,
once per operation, and forgets it at the operation's terminal commit.
"""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.message import DecodeError

from coordinator_svc.core.model import OperationRecord
from turnwire.runner.v1 import runner_pb2


class TurnDeadlines:
    """Each waiting turn's own deadline, read once from its envelope's limits."""

    def __init__(self) -> None:
        self._known: dict[str, datetime | None] = {}

    def of(self, record: OperationRecord) -> datetime | None:
        if record.state.terminal:
            return None
        if record.operation_id not in self._known:
            self._known[record.operation_id] = _envelope_deadline(record.envelope)
        return self._known[record.operation_id]

    def forget(self, operation_id: str) -> None:
        self._known.pop(operation_id, None)


def _envelope_deadline(envelope: bytes) -> datetime | None:
    parsed = runner_pb2.TurnEnvelope()
    try:
        parsed.ParseFromString(envelope)
    except DecodeError:
        return None  # acceptance built these bytes; nothing to enforce if unreadable
    if not parsed.limits.HasField("deadline"):
        return None
    return parsed.limits.deadline.ToDatetime(tzinfo=UTC)
