"""A grpc.aio client interceptor that loses requests or responses on purpose.

    faults = FaultInterceptor(Fault("Dispatch", DROP_RESPONSE, nth=1))
    channel = grpc.aio.insecure_channel(address, interceptors=faults.all())

- DROP_REQUEST: the call is never made; the caller sees UNAVAILABLE.
- DROP_RESPONSE: the call is made and completes on the server; the caller
  still sees UNAVAILABLE (the reply was "lost on the way back").

A fault fires on the ``nth`` call of its method (1-based, counted per method
name, e.g. "Dispatch", "GetOperationStatus"), once, then runs ``on_fire``.
``block(*methods)`` drops every request of those methods until ``unblock()``
(a runner that is unreachable for a while); a server stream (e.g.
"WatchOperations") open when its method is blocked fails UNAVAILABLE at its
next message, as a real stream does: gRPC over HTTP/2 never loses a message
from a stream that goes on (a watch's cursor replay relies on it, C9a).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from grpc.aio import Metadata

DROP_REQUEST = "drop_request"
DROP_RESPONSE = "drop_response"


@dataclass
class Fault:
    method: str
    kind: str
    nth: int = 1
    on_fire: Callable[[], None] | None = None
    fired: bool = False


def _lost(what: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, Metadata(), Metadata(), details=f"fault injected: {what}"
    )


class FaultInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, *faults: Fault) -> None:
        self.faults = list(faults)
        self.calls: collections.Counter[str] = collections.Counter()
        self.blocked: set[str] = set()

    def all(self) -> list[Any]:
        """This interceptor and its server-stream side (grpc.aio registers one
        interceptor per call type)."""
        return [self, _StreamSide(self)]

    def block(self, *methods: str) -> None:
        self.blocked.update(methods)

    def unblock(self) -> None:
        self.blocked.clear()

    def _fault_for(self, method: str) -> Fault | None:
        for fault in self.faults:
            if not fault.fired and fault.method == method and fault.nth == self.calls[method]:
                fault.fired = True
                if fault.on_fire is not None:
                    fault.on_fire()
                return fault
        return None

    async def intercept_unary_unary(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        raw = client_call_details.method
        method = (raw.decode() if isinstance(raw, bytes) else str(raw)).rsplit("/", 1)[-1]
        self.calls[method] += 1
        if method in self.blocked:
            raise _lost(f"{method} request dropped (blocked)")
        fault = self._fault_for(method)
        if fault is not None and fault.kind == DROP_REQUEST:
            raise _lost(f"{method} request dropped")
        call = await continuation(client_call_details, request)
        if fault is not None and fault.kind == DROP_RESPONSE:
            await call  # the server did the work; only the reply is lost
            raise _lost(f"{method} response dropped")
        return call


class _StreamSide(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, owner: FaultInterceptor) -> None:
        self.owner = owner

    async def intercept_unary_stream(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        raw = client_call_details.method
        method = (raw.decode() if isinstance(raw, bytes) else str(raw)).rsplit("/", 1)[-1]
        owner = self.owner
        owner.calls[method] += 1
        if method in owner.blocked:
            raise _lost(f"{method} request dropped (blocked)")
        call = await continuation(client_call_details, request)

        async def filtered() -> Any:
            async for message in call:
                if method in owner.blocked:
                    call.cancel()
                    raise _lost(f"{method} stream cut (blocked)")
                yield message

        return filtered()
