"""One table from what went wrong to what the client sees (PROTOCOL.md §7).

Every failure of a TurnService call leaves as a gRPC status code plus a
``google.rpc.ErrorInfo`` whose reason is a contract string from
``errors.proto``. The tree of what handlers may raise, drawn once::

    Exception
    ├── ApiError                    refused by the API layer itself: carries its reason,
    │                               message and metadata; its code is REFUSAL_CODES[reason]
    │                               (auth, validation, NOT_FOUND, NO_RUNNER_FOR_TURN, ...)
    ├── ports.JournalError
    │   ├── JournalUnavailable      -> UNAVAILABLE         JOURNAL_UNAVAILABLE  (fail closed)
    │   ├── SchemaTooNew            -> UNAVAILABLE         JOURNAL_UNAVAILABLE
    │   ├── JournalNotMigrated      -> UNAVAILABLE         JOURNAL_UNAVAILABLE
    │   ├── IdempotencyKeyReused    -> FAILED_PRECONDITION IDEMPOTENCY_KEY_REUSED
    │   └── WriteConflict           -> ABORTED             JOURNAL_UNAVAILABLE  (nothing
    │       ├── StaleVersion                                changed; retry the call)
    │       └── LeaseLost
    ├── edges.IllegalTransition     -> ABORTED             JOURNAL_UNAVAILABLE  (a state
    │                                                       change raced ours; retry)
    └── anything else               -> INTERNAL, no details (logged; a bug), including
                                       ports.InvalidWrite

Nothing here decides *whether* to fail; it only names the failure the same
way every time, so clients can switch on (code, reason).

Before any handler runs, the edge guard (``turnwire.guard``, registered by
``servicer.add_to_server``) answers undecodable requests REQUEST_MALFORMED,
applies :func:`edge_refusal`, and turns anything that still escapes a handler
into the same bare INTERNAL.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import grpc
from google.protobuf.message import Message

from coordinator_svc.core.edges import IllegalTransition
from coordinator_svc.ports import (
    IdempotencyKeyReused,
    JournalNotMigrated,
    JournalUnavailable,
    SchemaTooNew,
    WriteConflict,
)
from turnwire.common.v1 import errors_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.errors import status_with_details
from turnwire.guard import EdgeRefusal, uint64_overflow

_log = logging.getLogger(__name__)
_R = errors_pb2.ErrorReason
# SubmitAndWatchRequest.submit: refusals name its fields as SubmitTurn does.
SUBMISSION_PREFIX = "submit."


_C = grpc.StatusCode
# The one table from a refusal's reason to its gRPC status code: every refusal
# the coordinator's API decides (TurnService, AdminService, the console) is an
# ApiError naming only its reason, and leaves with this code, so one reason
# never reaches a client with two codes. (The runner has its own table,
# runner_svc/transport/errors.py; journal failures are the _TABLE below.)
REFUSAL_CODES: Mapping[errors_pb2.ErrorReason.ValueType, grpc.StatusCode] = MappingProxyType(
    {
        # The request itself (nothing changed).
        _R.ERROR_REASON_TURN_INVALID: _C.INVALID_ARGUMENT,
        _R.ERROR_REASON_ARGUMENT_INVALID: _C.INVALID_ARGUMENT,
        _R.ERROR_REASON_IDEMPOTENCY_KEY_INVALID: _C.INVALID_ARGUMENT,
        _R.ERROR_REASON_PAGE_TOKEN_INVALID: _C.INVALID_ARGUMENT,
        # Who is asking.
        _R.ERROR_REASON_CREDENTIALS_MISSING: _C.UNAUTHENTICATED,
        _R.ERROR_REASON_CREDENTIALS_UNKNOWN: _C.UNAUTHENTICATED,
        _R.ERROR_REASON_CREDENTIALS_EXPIRED: _C.UNAUTHENTICATED,
        _R.ERROR_REASON_SCOPE_MISSING: _C.PERMISSION_DENIED,
        # What is asked for does not exist (or is another principal's, §7).
        _R.ERROR_REASON_OPERATION_NOT_FOUND: _C.NOT_FOUND,
        _R.ERROR_REASON_RUNNER_NOT_FOUND: _C.NOT_FOUND,
        _R.ERROR_REASON_RUNNER_CONFLICT: _C.ALREADY_EXISTS,
        # The system is not in the state the call needs (C6b, V2-V5, M2-M3).
        _R.ERROR_REASON_NO_RUNNER_FOR_TURN: _C.FAILED_PRECONDITION,
        _R.ERROR_REASON_NO_RUNNER_FOR_EXECUTOR: _C.FAILED_PRECONDITION,
        _R.ERROR_REASON_OPERATION_NOT_TERMINAL: _C.FAILED_PRECONDITION,
        _R.ERROR_REASON_OPERATION_NOT_AMBIGUOUS: _C.FAILED_PRECONDITION,
        _R.ERROR_REASON_VERDICT_CONFLICT: _C.FAILED_PRECONDITION,
        _R.ERROR_REASON_REQUEUE_NOT_ALLOWED: _C.FAILED_PRECONDITION,
        _R.ERROR_REASON_RUNNER_CREDENTIALS_MISSING: _C.FAILED_PRECONDITION,
        _R.ERROR_REASON_RUNNER_NOT_DRAINED: _C.FAILED_PRECONDITION,
        _R.ERROR_REASON_RUNNER_HAS_TURNS: _C.FAILED_PRECONDITION,
        # Limits: retry later (with RetryInfo where the wait is known).
        _R.ERROR_REASON_QUOTA_EXCEEDED: _C.RESOURCE_EXHAUSTED,
        _R.ERROR_REASON_CONCURRENCY_LIMIT: _C.RESOURCE_EXHAUSTED,
        _R.ERROR_REASON_SHUTTING_DOWN: _C.UNAVAILABLE,
    }
)


class ApiError(Exception):
    """A refusal decided by the API layer: its reason, and its code from REFUSAL_CODES."""

    def __init__(
        self,
        reason: errors_pb2.ErrorReason.ValueType,
        message: str,
        *,
        retry_after: float | None = None,
        **metadata: str,
    ) -> None:
        super().__init__(message)
        # A reason missing from the table is a bug caught by
        # tests/coordinator/api/test_refusal_codes.py, never a silent default.
        self.code = REFUSAL_CODES[reason]
        self.reason = reason
        self.message = message
        self.metadata = metadata
        # Seconds after which a retry may succeed (google.rpc.RetryInfo).
        self.retry_after = retry_after


@dataclass(frozen=True)
class WireError:
    """What leaves the server: code, reason, message, ErrorInfo metadata."""

    code: grpc.StatusCode
    reason: errors_pb2.ErrorReason.ValueType
    message: str
    metadata: dict[str, str] = field(default_factory=dict)
    retry_after: float | None = None


# Order matters: the first matching class wins (subclasses before bases).
_Row = tuple[type[Exception], grpc.StatusCode, errors_pb2.ErrorReason.ValueType, str]
_TABLE: tuple[_Row, ...] = (
    (
        IdempotencyKeyReused,
        grpc.StatusCode.FAILED_PRECONDITION,
        _R.ERROR_REASON_IDEMPOTENCY_KEY_REUSED,
        "idempotency key already used with a different request; nothing changed",
    ),
    (
        JournalUnavailable,
        grpc.StatusCode.UNAVAILABLE,
        _R.ERROR_REASON_JOURNAL_UNAVAILABLE,
        "journal unavailable; nothing changed",
    ),
    (
        SchemaTooNew,
        grpc.StatusCode.UNAVAILABLE,
        _R.ERROR_REASON_JOURNAL_UNAVAILABLE,
        "journal schema is newer than this coordinator; nothing changed",
    ),
    (
        JournalNotMigrated,
        grpc.StatusCode.UNAVAILABLE,
        _R.ERROR_REASON_JOURNAL_UNAVAILABLE,
        "journal schema is not migrated; nothing changed",
    ),
    (
        WriteConflict,
        grpc.StatusCode.ABORTED,
        _R.ERROR_REASON_JOURNAL_UNAVAILABLE,
        "concurrent change to the operation; nothing changed, retry",
    ),
    (
        IllegalTransition,
        grpc.StatusCode.ABORTED,
        _R.ERROR_REASON_JOURNAL_UNAVAILABLE,
        "the operation changed state meanwhile; nothing changed, retry",
    ),
)


def wire_error(exc: Exception) -> WireError | None:
    """The wire form of ``exc``, or None for an unexpected error (a bug)."""
    if isinstance(exc, ApiError):
        return WireError(exc.code, exc.reason, exc.message, dict(exc.metadata), exc.retry_after)
    for kind, code, reason_value, message in _TABLE:
        if isinstance(exc, kind):
            metadata = {}
            if isinstance(exc, IdempotencyKeyReused):
                # The key is per principal, so the operation is the caller's own.
                metadata["operation_id"] = exc.operation_id
            return WireError(code, reason_value, message, metadata)
    return None


async def abort_with(context: Any, exc: Exception) -> None:
    """Abort the call with the wire form of ``exc`` (INTERNAL if unmapped)."""
    mapped = wire_error(exc)
    if mapped is None:
        _log.error("unexpected error in TurnService", exc_info=exc)
        await context.abort(grpc.StatusCode.INTERNAL, "internal error")
        return
    status = status_with_details(
        mapped.code, mapped.reason, mapped.message, mapped.metadata, mapped.retry_after
    )
    await context.abort(status.code, status.details, status.trailing_metadata)


def edge_refusal(method: str, request: Message) -> EdgeRefusal | None:
    """TurnService's one edge check, before any handler (``turnwire.guard``).

    A uint64 >= 2^63 anywhere in a request (``after_sequence``,
    ``turn.limits.budget_ms``, ``turn.files[i].size_bytes``) has no stored form
    in the journal: TURN_INVALID inside the turn, ARGUMENT_INVALID elsewhere,
    with the field named. SubmitAndWatch's embedded submission is named as
    SubmitTurn names it (``turn.limits.budget_ms``), so both refuse alike.
    """
    del method
    path = uint64_overflow(request)
    if path is None:
        return None
    if isinstance(request, coordinator_pb2.SubmitAndWatchRequest):
        path = path.removeprefix(SUBMISSION_PREFIX)
    in_turn = path.startswith("turn.")
    return EdgeRefusal(
        grpc.StatusCode.INVALID_ARGUMENT,
        _R.ERROR_REASON_TURN_INVALID if in_turn else _R.ERROR_REASON_ARGUMENT_INVALID,
        f"{path} must be below 2^63",
        {"field": path},
    )
