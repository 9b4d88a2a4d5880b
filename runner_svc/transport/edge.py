"""RunnerService's one place of edge validation, and its guarded registration.

Before any handler runs (turnwire.guard): undecodable bytes are
REQUEST_MALFORMED; a uint64 field >= 2^63 anywhere in the request (the
fencing_token, after_sequence, dispatch_stamp, ...) is ARGUMENT_INVALID with the
field named, because the dedupe table keeps signed 64-bit integers, and so is a
Dispatch without its §6.1 dispatch_stamp; an unexpected exception is a bare
INTERNAL. Every typed answer carries the
incarnation (C8a).
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message

from runner_svc.core.model import Refusal
from runner_svc.transport.errors import REFUSAL_CODES, reason_value
from runner_svc.transport.servicer import RunnerServicer
from turnwire.guard import EdgeRefusal, add_guarded_service, uint64_overflow
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc


def check_request(method: str, request: Message) -> EdgeRefusal | None:
    """The refusal for a decoded request that must not reach a handler, or None."""
    path = uint64_overflow(request)
    if path is not None:
        return _invalid(request, path, f"{path} must be below 2^63")
    if isinstance(request, runner_pb2.DispatchRequest) and request.dispatch_stamp == 0:
        # §6.1 W1: a Dispatch without a stamp could never be vouched for.
        return _invalid(request, "dispatch_stamp", "dispatch_stamp is required (§6.1 witness)")
    del method
    return None


def _invalid(request: Message, path: str, message: str) -> EdgeRefusal:
    metadata = {"field": path}
    operation_id = getattr(request, "operation_id", "")
    if isinstance(operation_id, str) and operation_id:
        metadata["operation_id"] = operation_id
    return EdgeRefusal(
        REFUSAL_CODES[Refusal.ARGUMENT_INVALID],
        reason_value(Refusal.ARGUMENT_INVALID),
        message,
        metadata,
    )


def add_to_server(servicer: RunnerServicer, server: Any) -> None:
    """Register RunnerService on ``server`` behind the edge guard."""
    add_guarded_service(
        server,
        runner_pb2_grpc.add_RunnerServiceServicer_to_server,
        servicer,
        check=check_request,
        metadata={"incarnation_id": servicer.service.incarnation_id},
    )
