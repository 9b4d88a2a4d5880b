"""The console's one way in: the coordinator's own gRPC services, called with the user's token.

The console holds no authority of its own. Every JSON request is answered by
calling TurnService (and AdminService) on this coordinator over a real
channel, with the bearer token the browser sent, so the same authentication,
scopes, limits and typed errors apply as for any other caller. A gRPC failure
becomes an HTTP status and a JSON body carrying the contract's ErrorInfo
reason (:func:`http_error_for`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

from turnwire.errors import error_info
from turnwire.secure_channels import channel_credentials
from turnwire.serving import split_host_port
from turnwire.transport_security import TlsMaterial, require_loopback_for_plaintext

# Seconds one upstream call may take before the console answers 504.
CALL_TIMEOUT_SECONDS = 10.0

# gRPC status -> HTTP status. Anything not listed is a 502: the console could
# not get an answer it can name.
_HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


@dataclass(frozen=True)
class HttpError(Exception):
    """What the JSON API answers when a request cannot be served."""

    status: int
    code: str
    message: str
    reason: str = ""

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "status": self.status,
                "code": self.code,
                "reason": self.reason,
                "message": self.message,
            }
        }


def http_error_for(error: grpc.RpcError) -> HttpError:
    """The HTTP answer for a failed upstream call: status from the gRPC code, the
    contract's ErrorInfo reason and message when the coordinator sent one."""
    typed = error_info(error)
    code_getter = getattr(error, "code", None)
    code = code_getter() if callable(code_getter) else grpc.StatusCode.UNKNOWN
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    details_getter = getattr(error, "details", None)
    details = details_getter() if callable(details_getter) else None
    message = typed.message if typed is not None else (details or code.name)
    return HttpError(
        status=_HTTP_STATUS.get(code, 502),
        code=code.name,
        message=message,
        reason=typed.reason if typed is not None else "",
    )


def dial_address(address: str) -> str:
    """Where to reach a server bound to ``address``: a wildcard host (0.0.0.0, ::)
    is dialled on this machine's loopback."""
    host, port = split_host_port(address)
    if host in ("0.0.0.0", ""):
        return f"127.0.0.1:{port}"
    if host == "::":
        return f"[::1]:{port}"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def open_channel(address: str, tls: TlsMaterial | None) -> grpc.Channel:
    """A synchronous channel to the coordinator's public API: TLS trusting the
    deployment CA when the API serves TLS, else plaintext (loopback only)."""
    target = dial_address(address)
    if tls is not None:
        credentials = channel_credentials(tls, present_certificate=False)
        return grpc.secure_channel(target, credentials)
    require_loopback_for_plaintext(target, "coordinator address")
    return grpc.insecure_channel(target)


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)
