"""Typed errors on the wire: gRPC status + google.rpc.ErrorInfo.

The reason strings and their domain are defined once, in
``proto/turnwire/common/v1/errors.proto``; this module only derives them.

    reason(ERROR_REASON_NO_FREE_SLOT) == "NO_FREE_SLOT"

Servers raise with :func:`abort` (grpc.aio) or build a status with
:func:`rich_status`; clients read a failure with :func:`error_info`, which
returns ``None`` for anything that is not a typed Turnwire error (a transport
failure, an untyped error): callers must treat ``None`` as "unknown" (C7).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from turnwire.common.v1 import errors_pb2

_PREFIX = "ERROR_REASON_"
DOMAIN: str = errors_pb2.ErrorReason.DESCRIPTOR.GetOptions().Extensions[errors_pb2.error_domain]
REASONS: frozenset[str] = frozenset(
    value.name.removeprefix(_PREFIX)
    for value in errors_pb2.ErrorReason.DESCRIPTOR.values
    if value.number != 0
)
_STATUS_DETAILS_KEY = "grpc-status-details-bin"
# A status travels in headers, which gRPC caps (16 KiB hard by default; the
# message is sent twice, once percent-encoded): an error that echoes hostile
# input (a 70 kB id) must still arrive, typed. Longer messages are cut (UTF-8
# bytes); longer metadata values are left out (never half a value).
MAX_MESSAGE_BYTES = 1024
MAX_METADATA_VALUE_BYTES = 256


def reason(value: errors_pb2.ErrorReason.ValueType) -> str:
    """The contract's reason string for an ErrorReason enum value."""
    return errors_pb2.ErrorReason.Name(value).removeprefix(_PREFIX)


@dataclass(frozen=True)
class TypedError:
    """A Turnwire error as read off the wire."""

    code: grpc.StatusCode
    reason: str
    message: str
    metadata: dict[str, str] = field(default_factory=dict)
    # From a google.rpc.RetryInfo detail: seconds to wait before retrying.
    retry_after: float | None = None


def rich_status(
    code: grpc.StatusCode,
    reason_value: errors_pb2.ErrorReason.ValueType,
    message: str,
    **metadata: str,
) -> grpc.Status:
    """A grpc.Status carrying an ErrorInfo with our domain and reason (bounded in size)."""
    return status_with_details(code, reason_value, message, metadata)


def status_with_details(
    code: grpc.StatusCode,
    reason_value: errors_pb2.ErrorReason.ValueType,
    message: str,
    metadata: Mapping[str, str],
    retry_after: float | None = None,
) -> grpc.Status:
    """:func:`rich_status`, plus a google.rpc.RetryInfo when ``retry_after``
    (seconds) is given."""
    info = error_details_pb2.ErrorInfo(reason=reason(reason_value), domain=DOMAIN)
    for key, value in metadata.items():
        if len(value.encode("utf-8")) <= MAX_METADATA_VALUE_BYTES:
            info.metadata[key] = value
    encoded = message.encode("utf-8")
    if len(encoded) > MAX_MESSAGE_BYTES:
        message = encoded[: MAX_MESSAGE_BYTES - 3].decode("utf-8", "ignore") + "…"
    detail = any_pb2.Any()
    detail.Pack(info)
    details = [detail]
    if retry_after is not None:
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.FromNanoseconds(max(0, round(retry_after * 1e9)))
        packed = any_pb2.Any()
        packed.Pack(retry)
        details.append(packed)
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message, details=details)
    return rpc_status.to_status(status)


async def abort(
    context: Any,
    code: grpc.StatusCode,
    reason_value: errors_pb2.ErrorReason.ValueType,
    message: str,
    **metadata: str,
) -> NoReturn:
    """Abort a grpc.aio call with a typed error (never returns)."""
    status = rich_status(code, reason_value, message, **metadata)
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("context.abort returned")  # pragma: no cover - abort raises


def error_info(error: grpc.RpcError) -> TypedError | None:
    """The typed error inside an RpcError, or None if it carries none of ours."""
    trailing = _trailing_metadata(error)
    for key, value in trailing:
        if key != _STATUS_DETAILS_KEY:
            continue
        status = status_pb2.Status.FromString(value)
        retry_after = _retry_after(status)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Is(info.DESCRIPTOR) and detail.Unpack(info) and info.domain == DOMAIN:
                return TypedError(
                    code=_code(error),
                    reason=info.reason,
                    message=status.message,
                    metadata=dict(info.metadata),
                    retry_after=retry_after,
                )
    return None


def _retry_after(status: status_pb2.Status) -> float | None:
    for detail in status.details:
        retry = error_details_pb2.RetryInfo()
        if detail.Is(retry.DESCRIPTOR) and detail.Unpack(retry):
            return float(retry.retry_delay.ToNanoseconds()) / 1e9
    return None


def _code(error: grpc.RpcError) -> grpc.StatusCode:
    code = getattr(error, "code", None)
    result = code() if callable(code) else None
    return result if isinstance(result, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def _trailing_metadata(error: grpc.RpcError) -> list[tuple[str, Any]]:
    getter = getattr(error, "trailing_metadata", None)
    metadata = getter() if callable(getter) else None
    if metadata is None:
        return []
    return [(item[0], item[1]) for item in metadata]
