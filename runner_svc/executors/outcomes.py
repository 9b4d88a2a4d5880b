"""Building ExecutionOutcome values the same way in every executor.

The reason strings come from errors.proto (via turnwire.errors), never typed by hand.
"""

from __future__ import annotations

from runner_svc.core.settlement import ReportedOutcome
from runner_svc.executors.base import ExecutionOutcome
from turnwire.common.v1 import errors_pb2
from turnwire.errors import reason

EXECUTOR_FAILED = reason(errors_pb2.ERROR_REASON_EXECUTOR_FAILED)
RESULT_INVALID = reason(errors_pb2.ERROR_REASON_RESULT_INVALID)
CANCELLED = reason(errors_pb2.ERROR_REASON_CANCELLED)

# The largest output an executor may return; more is a RESULT_INVALID failure.
MAX_OUTPUT_BYTES = 1024 * 1024

OCTET_STREAM = "application/octet-stream"
TEXT_PLAIN = "text/plain; charset=utf-8"


def succeeded(
    output: bytes, content_type: str, metadata: dict[str, str] | None = None
) -> ExecutionOutcome:
    """A success, or RESULT_INVALID when the output is over MAX_OUTPUT_BYTES."""
    if len(output) > MAX_OUTPUT_BYTES:
        return failed(
            RESULT_INVALID,
            f"output is {len(output)} bytes; the limit is {MAX_OUTPUT_BYTES}",
            metadata,
        )
    return ExecutionOutcome(
        succeeded=True, output=output, content_type=content_type, metadata=dict(metadata or {})
    )


def failed(
    error_reason: str, message: str, metadata: dict[str, str] | None = None
) -> ExecutionOutcome:
    """A failure with an ErrorReason string and a human message."""
    return ExecutionOutcome(
        succeeded=False,
        error_reason=error_reason,
        error_message=message,
        metadata=dict(metadata or {}),
    )


def cancelled(message: str = "stopped before finishing") -> ExecutionOutcome:
    """The execution was stopped on request before it produced a result."""
    return failed(CANCELLED, message)


def describe_exception(error: BaseException) -> str:
    """The exception's type and text, as a failure message."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def reported_outcome(outcome: object) -> ReportedOutcome:
    """Copy the outcome's fields without trusting its type (R7 validates them)."""
    missing = object()
    succeeded = getattr(outcome, "succeeded", missing)
    return ReportedOutcome(
        succeeded=None if succeeded is missing else succeeded,
        output=getattr(outcome, "output", b""),
        content_type=getattr(outcome, "content_type", ""),
        error_reason=getattr(outcome, "error_reason", ""),
        error_message=getattr(outcome, "error_message", ""),
        metadata=getattr(outcome, "metadata", {}),
        effect=getattr(outcome, "effect", ""),
        retry_after=getattr(outcome, "retry_after", None),
    )
