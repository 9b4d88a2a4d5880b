"""The runner's gate: every call, to every service on the port, comes from its coordinator.

A runner holds other principals' results and executes whatever it admits, so
anyone who can reach its port must prove they are its coordinator first
(turnwire/transport_security.py says how). The gate stands in front of
RunnerService, health and reflection alike, before any request is decoded:

- plaintext (loopback only): no ``x-turnwire-runner-secret`` header is
  UNAUTHENTICATED / CREDENTIALS_MISSING, a different secret UNAUTHENTICATED /
  CREDENTIALS_UNKNOWN;
- mutual TLS: a caller without a client certificate cannot finish the
  handshake; one whose certificate's CN is not a coordinator identity of this
  runner is PERMISSION_DENIED / CALLER_NOT_ALLOWED.

A refusal names nothing of the runner (no incarnation, no store, no digest):
a caller who is not entitled to them learns only that it was turned away.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from turnwire.common.v1 import errors_pb2
from turnwire.errors import rich_status
from turnwire.transport_security import SECRET_HEADER, RunnerAccess

log = logging.getLogger("runner_svc.access")

_R = errors_pb2.ErrorReason
Behavior = Callable[[Any, Any], Any]


def _refusal(code: grpc.StatusCode, reason: _R.ValueType, message: str) -> grpc.Status:
    return rich_status(code, reason, message)


MISSING = _refusal(
    grpc.StatusCode.UNAUTHENTICATED,
    _R.ERROR_REASON_CREDENTIALS_MISSING,
    f"this runner serves only its coordinator: send the runner secret ({SECRET_HEADER})",
)
UNKNOWN = _refusal(
    grpc.StatusCode.UNAUTHENTICATED,
    _R.ERROR_REASON_CREDENTIALS_UNKNOWN,
    "this runner serves only its coordinator: wrong runner secret",
)
NO_CERTIFICATE = _refusal(
    grpc.StatusCode.UNAUTHENTICATED,
    _R.ERROR_REASON_CREDENTIALS_MISSING,
    "this runner serves only its coordinator: present a client certificate",
)
NOT_ALLOWED = _refusal(
    grpc.StatusCode.PERMISSION_DENIED,
    _R.ERROR_REASON_CALLER_NOT_ALLOWED,
    "this runner serves only its coordinator: your certificate names another identity",
)


async def _abort(context: Any, status: grpc.Status) -> None:
    await context.abort(status.code, status.details, status.trailing_metadata)


def _refusing(handler: grpc.RpcMethodHandler, status: grpc.Status) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s shape that turns the call away without decoding it."""

    async def unary_reply(request: Any, context: Any) -> Any:
        await _abort(context, status)

    async def streamed_reply(request: Any, context: Any) -> Any:
        await _abort(context, status)
        yield  # pragma: no cover - abort raises; this makes it an async generator

    behavior = streamed_reply if handler.response_streaming else unary_reply
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(behavior)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(behavior)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(behavior)
    return grpc.unary_unary_rpc_method_handler(behavior)


def _first_secret(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == SECRET_HEADER and isinstance(value, str):
            return value
    return None


class _RefusalLog:
    """One warning per window, with how many were turned away since: a flood of
    refused calls must not become a flood of log lines."""

    def __init__(self, window_seconds: float = 10.0) -> None:
        self._window = window_seconds
        self._next_at = 0.0
        self._quiet = 0

    def warn(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now < self._next_at:
            self._quiet += 1
            return
        self._next_at = now + self._window
        quiet, self._quiet = self._quiet, 0
        suffix = f" ({quiet} more refused since the last such line)" if quiet else ""
        log.warning(message + suffix, *args)


class _Checked:
    """Wraps one method's handler so each call checks the TLS identity first."""

    def __init__(self, check: Callable[[Any], Awaitable[None]]) -> None:
        self._check = check

    def wrap(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        kind = (handler.request_streaming, handler.response_streaming)
        original: Behavior = {
            (False, False): handler.unary_unary,
            (False, True): handler.unary_stream,
            (True, False): handler.stream_unary,
            (True, True): handler.stream_stream,
        }[kind]
        behavior = self._streamed(original) if handler.response_streaming else self._unary(original)
        make = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[kind]
        return make(
            behavior,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _unary(self, original: Behavior) -> Behavior:
        check = self._check

        async def checked(request: Any, context: Any) -> Any:
            await check(context)
            return await original(request, context)

        return checked

    def _streamed(self, original: Behavior) -> Behavior:
        check = self._check

        async def checked(request: Any, context: Any) -> Any:
            await check(context)
            replies = original(request, context)
            if hasattr(replies, "__aiter__"):
                async for reply in replies:
                    yield reply
            else:  # a coroutine that writes through context.write
                await replies

        return checked


class RunnerGate(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped
    """The server interceptor in front of every service on a runner's port."""

    def __init__(self, access: RunnerAccess) -> None:
        self._secret = access.secret
        self._identities = frozenset(access.coordinator_identities)
        self._checked = _Checked(self._check_identity)
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}
        self.refused = 0  # calls turned away (tests, operators' logs)
        self._log = _RefusalLog()

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[grpc.RpcMethodHandler | None]],
        details: Any,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None:
            return None
        if self._secret is None:
            return self._with_identity_check(details.method, handler)
        presented = _first_secret(details.invocation_metadata)
        if presented is not None and hmac.compare_digest(
            presented.encode("utf-8"), self._secret.encode("utf-8")
        ):
            return handler
        self.refused += 1
        self._log.warn(
            "refused %s: %s runner secret", details.method, "no" if presented is None else "wrong"
        )
        return _refusing(handler, MISSING if presented is None else UNKNOWN)

    def _with_identity_check(
        self, method: str, handler: grpc.RpcMethodHandler
    ) -> grpc.RpcMethodHandler:
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            wrapped = self._wrapped[method] = self._checked.wrap(handler)
        return wrapped

    async def _check_identity(self, context: Any) -> None:
        auth = context.auth_context()
        names = [v.decode("utf-8", "replace") for v in auth.get("x509_common_name", ())]
        if not names:
            self.refused += 1
            self._log.warn("refused a call without a client certificate from %s", context.peer())
            await _abort(context, NO_CERTIFICATE)
        if not any(name in self._identities for name in names):
            self.refused += 1
            self._log.warn(
                "refused a call from %s: certificate CN %s is not a coordinator identity",
                context.peer(),
                names,
            )
            await _abort(context, NOT_ALLOWED)
