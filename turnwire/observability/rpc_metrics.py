"""gRPC latency histograms: every unary call a server handles, every unary call a client makes.

Families (labels: ``grpc_service``, ``grpc_method``, ``grpc_code``; the names
follow the usual gRPC exporters')::

    turnwire_grpc_server_handling_seconds   a server's unary calls, arrival to reply
    turnwire_grpc_client_handling_seconds   a client's unary calls, start to status,
                                            also by ``runner``: the one called

Streaming calls (WatchOperation, WatchOperations) are left out: they last as
long as a watcher wants, and their length says nothing about latency. Label
values come from the method names registered on the server (a call to an
unknown method finds no handler and is not observed), so they stay few.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Histogram

# Seconds: from a sub-millisecond status read to a Dispatch held for a turn to settle.
RPC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_LABELS = ("grpc_service", "grpc_method", "grpc_code")


def split_method(full_method: str) -> tuple[str, str]:
    """``/turnwire.runner.v1.RunnerService/Dispatch`` -> (service, method)."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service or "unknown", method or "unknown"


def _code_name(code: Any) -> str:
    """A status code as its name (``OK``, ``NOT_FOUND``); grpc.aio gives a StatusCode
    or, from a servicer context, sometimes its integer value or None (OK)."""
    if code is None:
        return "OK"
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    for candidate in grpc.StatusCode:
        if candidate.value[0] == code:
            return str(candidate.name)
    return "UNKNOWN"


def server_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        "turnwire_grpc_server_handling_seconds",
        "Unary gRPC calls this server handled, from arrival to reply, by service, "
        "method and status code.",
        _LABELS,
        buckets=RPC_BUCKETS,
        registry=registry,
    )


def client_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        "turnwire_grpc_client_handling_seconds",
        "Unary gRPC calls this process made (the coordinator's calls to runners), from "
        "start to status, by runner, service, method and status code.",
        ("runner", *_LABELS),
        buckets=RPC_BUCKETS,
        registry=registry,
    )


class ServerLatencyInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped
    """Times every unary-response call of the server it is installed on."""

    def __init__(self, histogram: Histogram) -> None:
        self._histogram = histogram

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler.response_streaming or handler.request_streaming:
            return handler
        service, method = split_method(handler_call_details.method)
        return grpc.unary_unary_rpc_method_handler(
            self._timed(handler.unary_unary, service, method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _timed(
        self, behavior: Callable[[Any, Any], Awaitable[Any]], service: str, method: str
    ) -> Callable[[Any, Any], Awaitable[Any]]:
        histogram = self._histogram

        async def timed(request: Any, context: Any) -> Any:
            started = time.perf_counter()
            code: Any = None
            try:
                reply = await behavior(request, context)
                code = context.code()
                return reply
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except BaseException:
                # An abort set its code before raising; anything else is UNKNOWN.
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            finally:
                histogram.labels(service, method, _code_name(code)).observe(
                    time.perf_counter() - started
                )

        return timed


class ClientLatencyInterceptor(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Times every unary call made on the channels it is installed on. It changes
    nothing about the call: the status is read once the call is done, on its own.
    A channel to one runner gets ``for_runner(name)``: its calls are labelled with
    that name (a call does not say where it went); this one labels them ``""``."""

    def __init__(
        self,
        histogram: Histogram,
        runner: str = "",
        observing: set[asyncio.Task[None]] | None = None,
    ) -> None:
        self._histogram = histogram
        self.runner = runner
        # The loop keeps only weak references to tasks: these are held until done.
        self._observing: set[asyncio.Task[None]] = observing if observing is not None else set()

    def for_runner(self, name: str) -> ClientLatencyInterceptor:
        """The same histogram, for the channel to runner ``name``."""
        return ClientLatencyInterceptor(self._histogram, name, self._observing)

    async def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Awaitable[Any]], details: Any, request: Any
    ) -> Any:
        started = time.perf_counter()
        method = details.method
        full = method.decode() if isinstance(method, bytes) else str(method)
        service, name = split_method(full)
        call = await continuation(details, request)
        histogram, observing, runner = self._histogram, self._observing, self.runner
        loop = asyncio.get_running_loop()

        def done(finished: Any) -> None:
            elapsed = time.perf_counter() - started
            if loop.is_closed():
                return
            # code() is a coroutine on grpc.aio calls; the call is over, so it
            # answers at once.
            task = loop.create_task(_observe(histogram, (runner, service, name), finished, elapsed))
            observing.add(task)
            task.add_done_callback(observing.discard)

        call.add_done_callback(done)
        return call


async def _observe(
    histogram: Histogram, labels: tuple[str, ...], call: Any, elapsed: float
) -> None:
    """Observe ``elapsed`` under ``labels`` and the call's status code."""
    try:
        code = await call.code()
    except asyncio.CancelledError:
        code = grpc.StatusCode.CANCELLED
    except Exception:  # a failed interceptor chain: the call ended without a status
        code = grpc.StatusCode.UNKNOWN
    histogram.labels(*labels, _code_name(code)).observe(elapsed)
