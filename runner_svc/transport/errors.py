"""The one table mapping runner refusals to gRPC status codes (errors.proto reasons).

Only these typed refusals prove an attempt was not accepted (C6), all but
OPERATION_PRUNED (typed, yet unknown: a pruned row's turn may have run, §9 K3);
every one carries the incarnation in its ErrorInfo metadata (C8a).
"""

from __future__ import annotations

from typing import Any, NoReturn

import grpc

from runner_svc.core.model import Refusal, RunnerRefusal
from turnwire.common.v1 import errors_pb2
from turnwire.errors import abort

_C = grpc.StatusCode

REFUSAL_CODES: dict[Refusal, grpc.StatusCode] = {
    Refusal.INCARNATION_MISMATCH: _C.FAILED_PRECONDITION,
    Refusal.NO_FREE_SLOT: _C.RESOURCE_EXHAUSTED,
    Refusal.SHUTTING_DOWN: _C.UNAVAILABLE,
    Refusal.STORE_WRITE_FAILED: _C.UNAVAILABLE,
    Refusal.ENVELOPE_MISMATCH: _C.ALREADY_EXISTS,
    Refusal.CANCELLED_BEFORE_DISPATCH: _C.FAILED_PRECONDITION,
    Refusal.STALE_FENCING_TOKEN: _C.FAILED_PRECONDITION,
    Refusal.DISPATCH_STALE: _C.FAILED_PRECONDITION,
    Refusal.OPERATION_PRUNED: _C.FAILED_PRECONDITION,
    Refusal.ENVELOPE_INVALID: _C.INVALID_ARGUMENT,
    Refusal.STORE_UNAVAILABLE: _C.UNAVAILABLE,
    Refusal.ARGUMENT_INVALID: _C.INVALID_ARGUMENT,
    Refusal.EXECUTOR_NOT_SERVED: _C.FAILED_PRECONDITION,
    Refusal.OPERATION_NOT_FOUND: _C.NOT_FOUND,
    Refusal.OUTPUT_UNAVAILABLE: _C.FAILED_PRECONDITION,
}


def reason_value(refusal: Refusal) -> errors_pb2.ErrorReason.ValueType:
    return errors_pb2.ErrorReason.Value("ERROR_REASON_" + refusal.value)


async def abort_refusal(
    context: Any, refusal: RunnerRefusal, incarnation_id: str, operation_id: str = ""
) -> NoReturn:
    metadata = {**refusal.details, "incarnation_id": incarnation_id}
    if operation_id:
        metadata["operation_id"] = operation_id
    await abort(
        context,
        REFUSAL_CODES[refusal.refusal],
        reason_value(refusal.refusal),
        refusal.message,
        **metadata,
    )
