"""AdminService's argument checks and refusals, each a typed ApiError (docs/ADMIN_API.md).

A refused call changes nothing: every check here runs before any write.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc

from coordinator_svc.api.admin_convert import executions_from_proto, verdict_from_proto
from coordinator_svc.api.convert import op_state_from_proto
from coordinator_svc.api.errors import ApiError
from coordinator_svc.core.model import Execution, OperationRecord, OpState
from coordinator_svc.core.operator import Refusal, Verdict, VerdictRecord
from turnwire.common.v1 import errors_pb2, turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2

_R = errors_pb2.ErrorReason
MAX_ID_CHARS = 255
MAX_REASON_CHARS = 2000
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
# Line breaks and tabs are fine in a reason; other control characters are not.
_ALLOWED_CONTROL = frozenset("\n\t")


def invalid(field: str, message: str) -> ApiError:
    return ApiError(
        grpc.StatusCode.INVALID_ARGUMENT, _R.ERROR_REASON_ARGUMENT_INVALID, message, field=field
    )


def operation_id(value: str) -> str:
    if not value or len(value) > MAX_ID_CHARS:
        raise invalid("operation_id", f"operation_id is required (1..{MAX_ID_CHARS} chars)")
    return value


def reason(value: str) -> str:
    """Why the operator acts: required, 1..2000 characters, not blank, no control
    characters but line breaks and tabs."""
    if not value.strip() or len(value) > MAX_REASON_CHARS:
        raise invalid("reason", f"reason is required: 1..{MAX_REASON_CHARS} characters, not blank")
    if any(not c.isprintable() and c not in _ALLOWED_CONTROL for c in value):
        raise invalid(
            "reason", "reason may not hold control characters (line breaks and tabs are fine)"
        )
    return value


def verdict(value: coordinator_pb2.Verdict.ValueType) -> Verdict:
    try:
        return verdict_from_proto(value)
    except ValueError:
        raise invalid(
            "verdict", "verdict must be VERDICT_EXECUTED or VERDICT_NOT_EXECUTED"
        ) from None


def optional_name(field: str, value: str) -> str:
    if len(value) > MAX_ID_CHARS:
        raise invalid(field, f"{field} is at most {MAX_ID_CHARS} characters")
    return value


def states(values: Iterable[coordinator_pb2.OperationState.ValueType]) -> tuple[OpState, ...]:
    try:
        return tuple(op_state_from_proto(value) for value in values)
    except ValueError:
        raise invalid(
            "states", "states must name known operation states (not UNSPECIFIED)"
        ) from None


def executions(values: Iterable[turn_pb2.Execution.ValueType]) -> tuple[Execution, ...]:
    try:
        return executions_from_proto(values)
    except ValueError:
        raise invalid("executions", "executions must name known values (not UNSPECIFIED)") from None


def page_size(requested: int) -> int:
    return DEFAULT_PAGE_SIZE if requested == 0 else min(requested, MAX_PAGE_SIZE)


def runner(value: str, configured: Iterable[str]) -> str:
    if not value or len(value) > MAX_ID_CHARS:
        raise invalid("runner", f"runner is required (1..{MAX_ID_CHARS} chars)")
    if value not in set(configured):
        raise ApiError(
            grpc.StatusCode.NOT_FOUND,
            _R.ERROR_REASON_RUNNER_NOT_FOUND,
            f"no configured runner is named {value!r}",
            runner=value,
        )
    return value


def no_runner_for(pool: str, kind: str) -> ApiError:
    return ApiError(
        grpc.StatusCode.FAILED_PRECONDITION,
        _R.ERROR_REASON_NO_RUNNER_FOR_TURN,
        f"no configured runner serves pool {pool!r} for {kind} turns",
        pool=pool,
        kind=kind,
    )


def not_found() -> ApiError:
    return ApiError(
        grpc.StatusCode.NOT_FOUND, _R.ERROR_REASON_OPERATION_NOT_FOUND, "operation not found"
    )


def refused(refusal: Refusal, record: OperationRecord, kept: VerdictRecord | None) -> ApiError:
    """The typed FAILED_PRECONDITION for an operator's act the rules refuse."""
    op_id = record.operation_id
    if refusal is Refusal.OPERATION_NOT_TERMINAL:
        return ApiError(
            grpc.StatusCode.FAILED_PRECONDITION,
            _R.ERROR_REASON_OPERATION_NOT_TERMINAL,
            f"operation {op_id} is {record.state.value}, not terminal yet: wait for it to end",
            state=record.state.value,
        )
    if refusal is Refusal.OPERATION_NOT_AMBIGUOUS:
        return ApiError(
            grpc.StatusCode.FAILED_PRECONDITION,
            _R.ERROR_REASON_OPERATION_NOT_AMBIGUOUS,
            f"operation {op_id} has execution {record.execution.value}: "
            "a verdict is only for UNKNOWN",
            execution=record.execution.value,
        )
    if refusal is Refusal.VERDICT_CONFLICT and kept is not None:
        return ApiError(
            grpc.StatusCode.FAILED_PRECONDITION,
            _R.ERROR_REASON_VERDICT_CONFLICT,
            f"operation {op_id} already has the verdict {kept.verdict.value} "
            f"(by {kept.recorded_by}); a verdict is final",
            recorded=kept.verdict.value,
            by=kept.recorded_by,
        )
    return ApiError(
        grpc.StatusCode.FAILED_PRECONDITION,
        _R.ERROR_REASON_REQUEUE_NOT_ALLOWED,
        f"operation {op_id} has execution {record.execution.value}"
        + (f" and the verdict {kept.verdict.value}" if kept is not None else " and no verdict")
        + ": only NOT_STARTED, or UNKNOWN with a NOT_EXECUTED verdict, may be requeued",
        execution=record.execution.value,
        verdict=kept.verdict.value if kept is not None else "",
    )
