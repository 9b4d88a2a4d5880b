"""Each waiting turn's time limits, read once from its envelope (issue 9).

Two limits apply to a QUEUED turn: its own deadline (``limits.deadline``) and
its queue timeout (``limits.queue_timeout``, else the coordinator's default,
counted from acceptance). The core enforces them (decide_tick); the shell only
reads them, once per operation, and forgets them at the terminal commit.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.protobuf.message import DecodeError

from coordinator_svc.core.model import OperationRecord
from coordinator_svc.driver.memory import Limits, Memory
from turnwire.runner.v1 import runner_pb2


class TurnDeadlines:
    """(deadline, queue deadline) per waiting turn, from its envelope's limits.

    ``queue_timeout``: the coordinator's default in seconds (None: none); a
    turn's own ``limits.queue_timeout`` replaces it, and zero there means none.
    """

    def __init__(self, queue_timeout: float | None = None, memory: Memory | None = None) -> None:
        self._default_queue_timeout = queue_timeout
        # Kept in each operation's memory record (driver.memory), read once.
        self._memory = memory if memory is not None else Memory()

    def limits(self, record: OperationRecord) -> Limits:
        if record.state.terminal:
            return None, None
        known = self._memory.of(record.operation_id).limits
        if known is None:
            known = self._read(record)
            self._memory.update(record.operation_id, limits=known)
        return known

    def of(self, record: OperationRecord) -> datetime | None:
        return self.limits(record)[0]

    def first(self, record: OperationRecord) -> datetime | None:
        """The earlier of the two limits, if any."""
        return min((at for at in self.limits(record) if at is not None), default=None)

    def forget(self, operation_id: str) -> None:
        self._memory.update(operation_id, limits=None)

    def __contains__(self, operation_id: object) -> bool:
        """Whether this operation's limits are held (tests: memory stays bounded)."""
        return isinstance(operation_id, str) and self._memory.of(operation_id).limits is not None

    def _read(self, record: OperationRecord) -> Limits:
        parsed = runner_pb2.TurnEnvelope()
        try:
            parsed.ParseFromString(record.envelope)
        except DecodeError:
            parsed = runner_pb2.TurnEnvelope()  # acceptance built these bytes; nothing to read
        limits = parsed.limits
        deadline = limits.deadline.ToDatetime(tzinfo=UTC) if limits.HasField("deadline") else None
        timeout = self._default_queue_timeout
        if limits.HasField("queue_timeout"):
            own = limits.queue_timeout.ToTimedelta().total_seconds()
            timeout = own if own > 0 else None
        queue_deadline = (
            record.created_at + timedelta(seconds=timeout) if timeout is not None else None
        )
        return deadline, queue_deadline
