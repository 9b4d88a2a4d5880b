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
from google.protobuf.message import DecodeError

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
MALFORMED = _refusal(
    grpc.StatusCode.INVALID_ARGUMENT,
    _R.ERROR_REASON_REQUEST_MALFORMED,
    "the request bytes do not decode as its request message",
)
NOT_ALLOWED = _refusal(
    grpc.StatusCode.PERMISSION_DENIED,
    _R.ERROR_REASON_CALLER_NOT_ALLOWED,
    "this runner serves only its coordinator: your certificate names another identity",
)


async def _abort(context: Any, status: grpc.Status) -> None:
    await context.abort(status.code, status.details, status.trailing_metadata)


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


class _Gated:
    """One method's handler behind the gate: the same shape, the check first, and the
    request decoded only once the caller passed (the wrapped handler receives raw bytes)."""

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
        decode: Callable[[bytes], Any] = handler.request_deserializer or (lambda raw: raw)
        if handler.request_streaming:
            behavior = self._streamed_in(original, decode, handler.response_streaming)
        elif handler.response_streaming:
            behavior = self._streamed_out(original, decode)
        else:
            behavior = self._unary(original, decode)
        make = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[kind]
        return make(
            behavior, request_deserializer=None, response_serializer=handler.response_serializer
        )

    def _unary(self, original: Behavior, decode: Callable[[bytes], Any]) -> Behavior:
        check = self._check

        async def checked(raw: bytes, context: Any) -> Any:
            await check(context)
            return await original(await _decoded(decode, raw, context), context)

        return checked

    def _streamed_out(self, original: Behavior, decode: Callable[[bytes], Any]) -> Behavior:
        check = self._check

        async def checked(raw: bytes, context: Any) -> Any:
            await check(context)
            request = await _decoded(decode, raw, context)
            async for reply in _replies(original(request, context)):
                yield reply

        return checked

    def _streamed_in(
        self, original: Behavior, decode: Callable[[bytes], Any], streams_out: bool
    ) -> Behavior:
        check = self._check

        async def decoded(raws: Any, context: Any) -> Any:
            async for raw in raws:
                yield await _decoded(decode, raw, context)

        async def checked_out(raws: Any, context: Any) -> Any:
            await check(context)
            async for reply in _replies(original(decoded(raws, context), context)):
                yield reply

        async def checked_in(raws: Any, context: Any) -> Any:
            await check(context)
            return await original(decoded(raws, context), context)

        return checked_out if streams_out else checked_in


async def _decoded(decode: Callable[[bytes], Any], raw: bytes, context: Any) -> Any:
    """The request, or a typed REQUEST_MALFORMED for bytes that do not decode (health and
    reflection decode with the generated parser, which raises; RunnerService's guard
    never does)."""
    try:
        return decode(raw)
    except DecodeError:
        await _abort(context, MALFORMED)


async def _replies(replies: Any) -> Any:
    """What a response-streaming behavior produced: an async generator's replies, or
    nothing more for a coroutine that writes through context.write."""
    if hasattr(replies, "__aiter__"):
        async for reply in replies:
            yield reply
    else:
        await replies


class RunnerGate:
    """The check in front of every method handler on a runner's port
    (``turnwire.serving.start_server(wrap_handlers=gate.wrap)``)."""

    def __init__(self, access: RunnerAccess) -> None:
        self._secret = access.secret.encode("utf-8") if access.secret is not None else None
        self._identities = frozenset(access.coordinator_identities)
        self._gated = _Gated(
            self._check_secret if self._secret is not None else self._check_identity
        )
        self.refused = 0  # calls turned away (tests, operators' logs)
        self._log = _RefusalLog()

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        del method  # every method is gated alike
        return self._gated.wrap(handler)

    async def _check_secret(self, context: Any) -> None:
        assert self._secret is not None
        presented = _first_secret(context.invocation_metadata())
        if presented is not None and hmac.compare_digest(presented.encode("utf-8"), self._secret):
            return
        self.refused += 1
        self._log.warn(
            "refused a call from %s: %s runner secret",
            context.peer(),
            "no" if presented is None else "wrong",
        )
        await _abort(context, MISSING if presented is None else UNKNOWN)

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
