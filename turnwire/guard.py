"""The edge guard both services put in front of their handlers.

grpc.aio decodes a request before any handler runs, and turns whatever a
handler raises into ``UNKNOWN`` with the Python exception class and text in
the details. Neither is a typed answer, and both leak internals. A service
registers through :func:`add_guarded_service` instead of the generated
``add_*Servicer_to_server`` alone, and every call of that service then gets:

- request bytes that do not decode (corrupt wire format, invalid UTF-8 in a
  string field): ``INVALID_ARGUMENT`` / ``REQUEST_MALFORMED``, nothing read;
- the service's own ``check(method, request)`` (its one place of edge
  validation, e.g. :func:`uint64_overflow`): the refusal it returns;
- any unexpected exception from the handler: ``INTERNAL`` with the fixed
  message ``"internal error"``; the traceback goes to the log, never the wire.

Every typed answer carries ``metadata`` (the runner puts its incarnation there,
C8a). Only unary-request methods are supported (both services have no others);
registering a client-streaming method fails loudly.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from turnwire.common.v1 import errors_pb2
from turnwire.errors import abort

log = logging.getLogger("turnwire.guard")

# Both stores keep integers as signed 64-bit: a uint64 at or above this has no
# stored form, so it is refused at the edge instead of failing deep inside.
UINT64_LIMIT = 2**63
INTERNAL_MESSAGE = "internal error"


@dataclass(frozen=True)
class EdgeRefusal:
    """What a service's edge check refuses a request with."""

    code: grpc.StatusCode
    reason: errors_pb2.ErrorReason.ValueType
    message: str
    metadata: Mapping[str, str] = field(default_factory=dict)


EdgeCheck = Callable[[str, Message], EdgeRefusal | None]
"""``check(method, request)``: the refusal for a decoded request, or None."""


def uint64_overflow(message: Message, prefix: str = "") -> str | None:
    """The path of the first uint64 field (at any depth) >= 2^63, or None.

    Paths read like ``turn.files[2].size_bytes`` or ``labels["k"]``. Fields
    whose message type holds no uint64 at any depth are not walked.
    """
    if not _holds_uint64(message.DESCRIPTOR):
        return None
    for descriptor, value in message.ListFields():
        if not _field_holds_uint64(descriptor):
            continue
        path = prefix + descriptor.name
        if descriptor.message_type is not None and descriptor.message_type.GetOptions().map_entry:
            found = _map_overflow(descriptor, value, path)
        elif descriptor.is_repeated:
            found = _first(
                _value_overflow(descriptor, item, f"{path}[{index}]")
                for index, item in enumerate(value)
            )
        else:
            found = _value_overflow(descriptor, value, path)
        if found is not None:
            return found
    return None


# Message type -> whether a uint64 field can occur in it at any depth.
_HOLDS_UINT64: dict[Any, bool] = {}


def _holds_uint64(message_type: Any) -> bool:  # a Descriptor (pure-Python or upb)
    known = _HOLDS_UINT64.get(message_type)
    if known is None:
        known = _HOLDS_UINT64[message_type] = _reaches_uint64(message_type, set())
    return known


def _field_holds_uint64(member: FieldDescriptor) -> bool:
    if member.cpp_type == FieldDescriptor.CPPTYPE_UINT64:
        return True
    return member.message_type is not None and _holds_uint64(member.message_type)


def _reaches_uint64(message_type: Any, on_path: set[Any]) -> bool:
    """Depth-first; a type already on the path adds nothing new (recursive messages)."""
    on_path.add(message_type)
    for member in message_type.fields:
        if member.cpp_type == FieldDescriptor.CPPTYPE_UINT64:
            return True
        nested = member.message_type
        if nested is not None and nested not in on_path and _reaches_uint64(nested, on_path):
            return True
    on_path.discard(message_type)
    return False


def _map_overflow(descriptor: FieldDescriptor, value: Any, path: str) -> str | None:
    entry = descriptor.message_type
    assert entry is not None  # a map field's entry message
    value_field = entry.fields_by_name["value"]
    return _first(
        _value_overflow(value_field, item, f"{path}[{key!r}]") for key, item in value.items()
    )


def _value_overflow(descriptor: FieldDescriptor, value: Any, path: str) -> str | None:
    if descriptor.cpp_type == FieldDescriptor.CPPTYPE_UINT64:
        return path if value >= UINT64_LIMIT else None
    if descriptor.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
        return uint64_overflow(value, path + ".")
    return None


def _first(found: Any) -> str | None:
    return next((path for path in found if path is not None), None)


class _Undecodable:
    """Stands in for a request whose bytes did not decode."""


_UNDECODABLE = _Undecodable()


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def deserialize(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception:  # DecodeError, bad UTF-8, anything: the bytes are not a request
            return _UNDECODABLE

    return deserialize


@dataclass(frozen=True)
class _Guard:
    method: str
    check: EdgeCheck | None
    metadata: Mapping[str, str]

    async def admit(self, request: Any, context: Any) -> None:
        """Abort with a typed refusal unless the request may reach the handler."""
        if request is _UNDECODABLE:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                errors_pb2.ERROR_REASON_REQUEST_MALFORMED,
                f"{self.method}: the request bytes do not decode as its request message",
                **self.metadata,
            )
        refusal = self.check(self.method, request) if self.check is not None else None
        if refusal is not None:
            metadata = {**self.metadata, **refusal.metadata}
            await abort(context, refusal.code, refusal.reason, refusal.message, **metadata)

    async def internal(self, context: Any) -> None:
        log.error("unexpected error in %s", self.method, exc_info=True)
        await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)

    def unary(self, behavior: Callable[..., Any]) -> Callable[..., Any]:
        async def guarded(request: Any, context: Any) -> Any:
            await self.admit(request, context)
            try:
                return await behavior(request, context)
            except grpc.aio.AbortError:
                raise
            except Exception:
                await self.internal(context)

        return guarded

    def streaming(self, behavior: Callable[..., Any]) -> Callable[..., AsyncIterator[Any]]:
        yields = inspect.isasyncgenfunction(behavior)

        async def guarded(request: Any, context: Any) -> AsyncIterator[Any]:
            await self.admit(request, context)
            try:
                if yields:
                    async for reply in behavior(request, context):
                        yield reply
                else:  # a coroutine that writes through context.write
                    await behavior(request, context)
            except grpc.aio.AbortError:
                raise
            except Exception:
                await self.internal(context)

        return guarded


def guard_handler(
    method: str,
    handler: grpc.RpcMethodHandler,
    check: EdgeCheck | None = None,
    metadata: Mapping[str, str] | None = None,
) -> grpc.RpcMethodHandler:
    """``handler`` with the guard in front (see the module docstring)."""
    if handler.request_streaming:
        raise TypeError(f"{method}: the edge guard supports unary-request methods only")
    guard = _Guard(method, check, dict(metadata or {}))
    deserializer = _tolerant(handler.request_deserializer)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(
            guard.streaming(handler.unary_stream),
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )
    return grpc.unary_unary_rpc_method_handler(
        guard.unary(handler.unary_unary),
        request_deserializer=deserializer,
        response_serializer=handler.response_serializer,
    )


class _GuardedGeneric(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc is untyped
    def __init__(self, inner: Any, wrap: Callable[[str, Any], Any]) -> None:
        self._inner = inner
        self._wrap = wrap
        self._cache: dict[str, Any] = {}

    def service(self, handler_call_details: Any) -> Any:
        method = handler_call_details.method
        if method not in self._cache:
            handler = self._inner.service(handler_call_details)
            if handler is None:
                return None
            self._cache[method] = self._wrap(method, handler)
        return self._cache[method]


class _GuardedServer:
    """Receives what a generated ``add_*Servicer_to_server`` registers; guards it."""

    def __init__(self, server: Any, wrap: Callable[[str, Any], Any]) -> None:
        self._server = server
        self._wrap = wrap

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self._server.add_generic_rpc_handlers(
            tuple(_GuardedGeneric(handler, self._wrap) for handler in handlers)
        )

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, Any]) -> None:
        self._server.add_registered_method_handlers(
            service,
            {name: self._wrap(f"/{service}/{name}", h) for name, h in handlers.items()},
        )


def wrapping_server(server: Any, wrap: Callable[[str, Any], Any]) -> Any:
    """A stand-in for ``server`` that registers every method handler given to it as
    ``wrap(method, handler)`` (generated ``add_*Servicer_to_server`` functions take it)."""
    return _GuardedServer(server, wrap)


def add_guarded_service(
    server: Any,
    add_servicer: Callable[[Any, Any], None],
    servicer: object,
    *,
    check: EdgeCheck | None = None,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """``add_servicer(servicer, server)`` with every method of it guarded."""

    def wrap(method: str, handler: Any) -> Any:
        return guard_handler(method, handler, check, metadata)

    add_servicer(servicer, _GuardedServer(server, wrap))
