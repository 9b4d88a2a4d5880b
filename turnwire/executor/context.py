"""The turn as an executor function sees it: ``TurnContext`` (docs/EXECUTORS.md).

One context per execution (per attempt). Everything on it is plain Python:
decoded input items, the model and its parameters, the limits as times, the
cancellation signal, ``emit()`` for partial output, ``heartbeat()``, and a
logger whose lines carry the turn's fields (docs/LOGS.md).

``emit``, ``heartbeat`` and ``check_cancelled`` are safe to call from any
thread, and from async code (they never block). The runner (or
turnwire.executor.testing) supplies the :class:`TurnChannel` behind them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from turnwire.executor.outcomes import OCTET_STREAM, TEXT_PLAIN, Cancelled
from turnwire.observability.logs import turn_extra

LOGGER = "turnwire.executor"


@dataclass(frozen=True)
class InputItem:
    """One input item of the turn, decoded."""

    item_id: str
    role: str
    content_type: str
    content: bytes
    metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The content as UTF-8 text."""
        return self.content.decode()


@dataclass(frozen=True)
class Model:
    """Which model serves the turn, and its parameters (strings, as submitted)."""

    provider: str = ""
    name: str = ""
    parameters: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FileRef:
    """A file the turn refers to; the bytes live elsewhere."""

    uri: str
    sha256: str = ""
    size_bytes: int = 0
    media_type: str = ""


@dataclass(frozen=True)
class Limits:
    """The turn's bounds, as the runner enforces them (R6, R12)."""

    deadline: datetime | None = None  # wall clock, UTC
    budget: timedelta | None = None  # run time from the start
    heartbeat_timeout: timedelta | None = None  # the longest without a heartbeat


class TurnChannel(Protocol):
    """What carries a context's output and heartbeats to its runner (or test helper).

    Both calls are thread-safe and never block on a reader."""

    def emit(self, data: bytes, content_type: str) -> int:
        """Stream one chunk; its offset. Raises OutputRefused (the turn goes on)."""
        ...

    def heartbeat(self) -> None:
        """Record a sign of life now."""
        ...


@dataclass(frozen=True)
class Turn:
    """What the runner knows of the turn (the context's read-only facts)."""

    operation_id: str
    attempt: int
    executor: str = "default"
    items: tuple[InputItem, ...] = ()
    model: Model = field(default_factory=Model)
    files: tuple[FileRef, ...] = ()
    item_metadata: Mapping[str, str] = field(default_factory=dict)
    principal: str = ""
    limits: Limits = field(default_factory=Limits)
    incarnation_id: str = ""


class TurnContext:
    """One execution of one turn: facts, limits, cancellation, output, heartbeat, log.

    ``operation_id`` is the same on every attempt of the turn: pass it downstream
    as the idempotency key (an ``Idempotency-Key`` header, a request id), so a
    provider that supports one never acts twice for this turn. ``attempt`` is
    this execution's number: 1 for the first, 2, 3, ... when the runner retries
    a failure you declared had no effect (``RetryableNoEffect``, PROTOCOL.md R15).
    (Before R15 it counted the coordinator's Dispatch attempts; a turn runs at
    most once per row, so without a retry policy it is 1.)
    """

    def __init__(self, turn: Turn, channel: TurnChannel) -> None:
        self.turn = turn
        self._channel = channel
        self._started = time.time()
        # Set once the runner asks the turn to stop; plain functions poll it (or
        # call check_cancelled); async functions are also cancelled (CancelledError).
        self.cancelled = threading.Event()
        self.log = logging.LoggerAdapter(
            logging.getLogger(LOGGER),
            turn_extra(
                turn.operation_id,
                attempt=turn.attempt,
                incarnation=turn.incarnation_id or None,
                principal=turn.principal or None,
            ),
        )

    # --- the turn ----------------------------------------------------------------

    @property
    def operation_id(self) -> str:
        return self.turn.operation_id

    @property
    def attempt(self) -> int:
        return self.turn.attempt

    @property
    def items(self) -> tuple[InputItem, ...]:
        return self.turn.items

    @property
    def model(self) -> Model:
        return self.turn.model

    @property
    def parameters(self) -> Mapping[str, str]:
        """The model's parameters (``model.parameters``)."""
        return self.turn.model.parameters

    @property
    def files(self) -> tuple[FileRef, ...]:
        return self.turn.files

    @property
    def item_metadata(self) -> Mapping[str, str]:
        return self.turn.item_metadata

    @property
    def principal(self) -> str:
        """The principal the turn runs for (opaque; never a credential)."""
        return self.turn.principal

    @property
    def limits(self) -> Limits:
        return self.turn.limits

    @property
    def deadline(self) -> datetime | None:
        return self.turn.limits.deadline

    def remaining(self) -> float | None:
        """Seconds left before the deadline or the budget runs out, whichever comes
        first (never below 0); None when the turn has neither."""
        ends = []
        if self.limits.deadline is not None:
            ends.append(self.limits.deadline.timestamp())
        if self.limits.budget is not None:
            ends.append(self._started + self.limits.budget.total_seconds())
        return max(0.0, min(ends) - time.time()) if ends else None

    # --- cancellation ------------------------------------------------------------

    def check_cancelled(self) -> None:
        """Raise Cancelled once the runner has asked the turn to stop."""
        if self.cancelled.is_set():
            raise Cancelled("the runner asked the turn to stop")

    # --- output and liveness ------------------------------------------------------

    def emit(self, data: str | bytes, *, content_type: str | None = None) -> int:
        """Stream a chunk of partial output; returns its offset (1, 2, ...).

        Text goes as UTF-8 ``text/plain``, bytes as ``application/octet-stream``
        unless ``content_type`` says otherwise. Counts as a heartbeat. Raises
        OutputRefused for a chunk over the runner's limit, or past the turn's
        stream budget: the turn goes on. Never blocks on a reader."""
        if isinstance(data, str):
            payload, default_type = data.encode(), TEXT_PLAIN
        elif isinstance(data, bytes | bytearray | memoryview):
            payload, default_type = bytes(data), OCTET_STREAM
        else:
            raise TypeError(f"emit() takes str or bytes, not {type(data).__name__}")
        if not payload:
            raise ValueError("emit() needs a non-empty chunk")
        return self._channel.emit(payload, content_type or default_type)

    def heartbeat(self) -> None:
        """Tell the runner the execution is alive (R12: a turn with a heartbeat
        timeout is stopped after that long without one)."""
        self._channel.heartbeat()


def utc(seconds: float) -> datetime:
    """Unix seconds as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, UTC)
