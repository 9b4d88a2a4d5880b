"""What an executor function returns or raises, and what the runner makes of it.

Return a :class:`Result` (or ``str``: UTF-8 ``text/plain``; or ``bytes``:
``application/octet-stream``) to succeed. Raise to fail, with an exception
named for what the caller should do about it:

- :class:`TurnFailed`: the turn failed; nothing is said about effects
  downstream, so nobody may assume none happened (never retried automatically).
  Any other exception means the same.
- :class:`RetryableNoEffect`: the turn failed *and nothing took effect
  downstream* (the provider refused the request before acting on it, say an
  HTTP 429): retrying cannot bill twice. A retry policy may retry it.
- :class:`FailedAfterEffect`: the turn failed *after* something took effect
  (tokens billed, a row written): never retry it automatically.

The runner records the declared effect on the settled row (``TurnError.effect``
on the wire: NONE, APPLIED, or UNSPECIFIED for undeclared), PROTOCOL.md R7.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from turnwire.vocabulary import DeclaredEffect, ErrorReason

# The largest result an executor may return; more fails the turn RESULT_INVALID.
MAX_RESULT_BYTES = 1024 * 1024

OCTET_STREAM = "application/octet-stream"
TEXT_PLAIN = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Result:
    """A successful turn's output: bytes or text, its content type, string metadata."""

    data: bytes | str
    content_type: str | None = None  # default: text/plain for str, octet-stream for bytes
    metadata: Mapping[str, str] = field(default_factory=dict)


class TurnFailed(Exception):
    """The turn failed. Effects downstream are not declared: unknown, never retried."""

    effect: DeclaredEffect | None = None


class RetryableNoEffect(TurnFailed):
    """The turn failed and nothing took effect downstream: a retry cannot bill twice.

    ``retry_after``: seconds until a retry may help (a provider's Retry-After).
    """

    effect = DeclaredEffect.NONE

    def __init__(self, message: str = "", *, retry_after: float | None = None) -> None:
        super().__init__(message)
        if retry_after is not None and not 0 <= retry_after <= 86400:
            raise ValueError("retry_after must be 0..86400 seconds")
        self.retry_after = retry_after


class FailedAfterEffect(TurnFailed):
    """The turn failed after something took effect downstream: never retry it."""

    effect = DeclaredEffect.APPLIED


class Cancelled(Exception):
    """Raised by ``TurnContext.check_cancelled()`` once the runner asked the turn to
    stop (a cancel, its deadline, budget or heartbeat timeout, a shutdown)."""


class OutputRefused(Exception):
    """``emit()`` refused a chunk; the turn goes on and nothing was streamed.

    ``reason``: CHUNK_TOO_LARGE (over the runner's chunk limit),
    STREAM_BUDGET_EXHAUSTED (past the turn's stream budget) or STREAM_CLOSED
    (the execution is over).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Outcome:
    """How one call of an executor function ended, as plain values (what the runner
    settles, R7, and what turnwire.executor.testing reports)."""

    succeeded: bool
    output: bytes = b""
    content_type: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""  # an ErrorReason string when it failed
    message: str = ""
    effect: DeclaredEffect | None = None  # declared effect downstream (None: undeclared)
    retry_after: float | None = None

    @property
    def text(self) -> str:
        """The output as UTF-8 text."""
        return self.output.decode()


def failed(reason: str, message: str) -> Outcome:
    return Outcome(False, reason=reason, message=message)


def outcome_of_return(value: object) -> Outcome:
    """What a function's return value means (see the module docstring)."""
    if isinstance(value, Result):
        data, content_type, metadata = value.data, value.content_type, value.metadata
    elif isinstance(value, str | bytes):
        data, content_type, metadata = value, None, {}
    else:
        return failed(
            ErrorReason.RESULT_INVALID,
            f"the function returned {type(value).__name__}, not a Result, str or bytes",
        )
    if isinstance(data, str):
        output, default_type = data.encode(), TEXT_PLAIN
    elif isinstance(data, bytes):
        output, default_type = data, OCTET_STREAM
    else:
        return failed(ErrorReason.RESULT_INVALID, "Result.data must be str or bytes")
    if len(output) > MAX_RESULT_BYTES:
        return failed(
            ErrorReason.RESULT_INVALID,
            f"the result is {len(output)} bytes; the limit is {MAX_RESULT_BYTES}",
        )
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        return failed(ErrorReason.RESULT_INVALID, "Result.metadata must map str to str")
    return Outcome(True, output, content_type or default_type, dict(metadata))


def outcome_of_error(error: BaseException) -> Outcome:
    """What an exception the function raised means (see the module docstring)."""
    if isinstance(error, Cancelled | asyncio.CancelledError):
        return failed(ErrorReason.CANCELLED, describe(error) if str(error) else "stopped")
    if isinstance(error, TurnFailed):
        retry_after = error.retry_after if isinstance(error, RetryableNoEffect) else None
        return Outcome(
            False,
            reason=ErrorReason.EXECUTOR_FAILED,
            message=describe(error),
            effect=error.effect,
            retry_after=retry_after,
        )
    return failed(ErrorReason.EXECUTOR_FAILED, describe(error))


def describe(error: BaseException) -> str:
    """The exception's type and text, as a failure message."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
