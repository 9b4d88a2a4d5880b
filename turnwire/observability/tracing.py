"""OpenTelemetry traces across SDK -> coordinator -> runner -> executor (issue 13).

Off by default. ``--otel-endpoint URL`` on ``python -m coordinator_svc serve``
and ``python -m runner_svc serve`` calls :func:`start`: spans go by OTLP over
gRPC to the collector at URL, the standard OTEL_* variables tuning the SDK
(docs/TRACING.md). Until then every helper here is a no-op that costs a
global read: no interceptor is installed, no span object is made.

What this module holds for both services:

- the tracer provider and its exporter (:func:`start`, :func:`shutdown`);
- the gRPC interceptors (opentelemetry-instrumentation-grpc) that make a span
  per RPC and carry the trace context in metadata (:func:`server_interceptors`,
  :func:`client_interceptors`; ``turnwire.serving`` and the runner channels
  add them);
- the turn's trace context, carried in its envelope (runner.proto
  ``TurnEnvelope.trace_context``): taken from the submitting call
  (:func:`submitted_trace_context`), read back whenever the coordinator acts
  on the turn later, however much later (:func:`turn_span`), and handed to
  the executor (:func:`executor_trace_context`).

Why the envelope: a turn's dispatch and settlement happen long after
SubmitTurn returned (a queued turn, a retry after backoff, a coordinator
restarted in between), so the submitting context must be as durable as the
turn; the envelope is written with the acceptance in one transaction (C1)
and every attempt sends the same bytes, so the runner and the executor read
the same context too. It is fixed once: a replayed SubmitTurn stores nothing
and the idempotency comparison (the request digest) never sees it.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import os
from collections.abc import Coroutine, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from turnwire.runner.v1 import runner_pb2

# OpenTelemetry itself is imported only once tracing is on, or a caller's
# trace context has to be read: a process that never traces never loads it
# (a fifth of a second at every start otherwise).
if TYPE_CHECKING:
    import grpc
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("turnwire.observability.tracing")

_T = TypeVar("_T")

COORDINATOR_SERVICE = "turnwire-coordinator"
RUNNER_SERVICE = "turnwire-runner"
# The standard variable that may stand for the flag (docs/TRACING.md); the
# generic OTEL_EXPORTER_OTLP_ENDPOINT alone does not turn tracing on, since
# it is often set for a process's metrics or logs.
TRACES_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
# W3C Trace Context's own bound on what a platform must propagate.
MAX_TRACESTATE_CHARS = 512
# Turns whose trace context this process has read back (one parse of the
# envelope per turn, not per span).
_REMEMBERED_TURNS = 4096
# The RPCs that are nobody's turn and only add noise: health checks and
# reflection (they still work, just untraced).
_UNTRACED_SERVICES = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection")

_OFF: AbstractContextManager[None] = contextlib.nullcontext()


class _Tracing:
    """This process's tracing: None everywhere until :func:`start`."""

    provider: TracerProvider | None = None
    tracer: Tracer | None = None
    turns: collections.OrderedDict[str, Context | None] = collections.OrderedDict()
    propagator: TraceContextTextMapPropagator | None = None


_state = _Tracing()


def enabled() -> bool:
    return _state.tracer is not None


def _propagator() -> TraceContextTextMapPropagator:
    if _state.propagator is None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        _state.propagator = TraceContextTextMapPropagator()
    return _state.propagator


def _current_span_valid(context: Context | None = None) -> bool:
    from opentelemetry import trace

    return trace.get_current_span(context).get_span_context().is_valid


# --- turning it on ----------------------------------------------------------------


def endpoint_url(text: str) -> str:
    """``--otel-endpoint``'s value: ``http://HOST:PORT`` (plaintext) or
    ``https://HOST:PORT`` (TLS) of an OTLP/gRPC collector; ValueError says why not."""
    parts = urlsplit(text.strip())
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = None
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
        raise ValueError(
            f"an OTLP/gRPC endpoint is http://HOST:PORT (plaintext) or https://HOST:PORT "
            f"(TLS), e.g. http://127.0.0.1:4317; got {text!r}"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"an OTLP/gRPC endpoint has no path or query; got {text!r}")
    return f"{parts.scheme}://{parts.netloc}"


def endpoint_from_env(own_variable: str, env: Mapping[str, str] | None = None) -> str | None:
    """The default of ``--otel-endpoint``: the service's own variable, else
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; None (off) when neither is set or
    OTEL_SDK_DISABLED is true."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    return env.get(own_variable) or env.get(TRACES_ENDPOINT_ENV) or None


def _endpoint_argument(text: str) -> str:
    try:
        return endpoint_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_endpoint_flag(parser: argparse.ArgumentParser, own_variable: str) -> None:
    """``--otel-endpoint URL``: the one flag that turns tracing on."""
    parser.add_argument(
        "--otel-endpoint",
        type=_endpoint_argument,
        default=endpoint_from_env(own_variable),
        metavar="URL",
        help="export OpenTelemetry traces by OTLP/gRPC to the collector at URL, e.g. "
        "http://127.0.0.1:4317 (https:// for TLS); off when not given. The standard OTEL_* "
        "variables tune it (OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, OTEL_BSP_SCHEDULE_DELAY, "
        f"OTEL_EXPORTER_OTLP_HEADERS...; docs/TRACING.md) [env {own_variable}, or "
        f"{TRACES_ENDPOINT_ENV}; OTEL_SDK_DISABLED=true keeps it off]",
    )


def start(service_name: str, endpoint: str) -> None:
    """Export this process's spans to ``endpoint`` (see :func:`endpoint_url`).

    ``service_name`` is the default of the ``service.name`` resource attribute;
    OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES override it. The SDK's other
    variables apply as documented by OpenTelemetry (OTEL_TRACES_SAMPLER,
    OTEL_BSP_*, OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_CERTIFICATE...).
    Installs the provider as the process's global one too, so code the runner
    calls in process (a ``callable:`` executor) traces into the same export.
    """
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    url = endpoint_url(endpoint)
    resource = Resource.create()
    named = str(resource.attributes.get(SERVICE_NAME, ""))
    if not named or named.startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter(endpoint=url, insecure=url.startswith("http://"))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    install(provider)
    log.info(
        "tracing on: spans of %s go to %s (OTLP/gRPC)",
        resource.attributes.get(SERVICE_NAME),
        url,
    )


def install(provider: TracerProvider) -> None:
    """Trace with ``provider`` (what :func:`start` does once it has built one;
    tests give one that keeps spans in memory)."""
    _state.provider = provider
    _state.tracer = provider.get_tracer("turnwire")
    _state.turns.clear()


def shutdown() -> None:
    """Send what is buffered and stop exporting (a clean stop's last step)."""
    provider = _state.provider
    _state.tracer = None
    _state.provider = None
    _state.turns.clear()
    if provider is not None:
        provider.shutdown()


# --- RPCs ------------------------------------------------------------------------------


def _traced_rpc(details: Any) -> bool:
    method = getattr(details, "method", "") or ""
    if isinstance(method, bytes):  # grpc.aio clients may give bytes
        method = method.decode("utf-8", "replace")
    return not str(method).lstrip("/").startswith(_UNTRACED_SERVICES)


def server_interceptors() -> tuple[grpc.aio.ServerInterceptor, ...]:
    """A span per served call, continuing the caller's trace (none while off)."""
    if _state.provider is None:
        return ()
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    # The instrumentation ships no type hints.
    interceptor = aio_server_interceptor(  # type: ignore[no-untyped-call]
        tracer_provider=_state.provider, filter_=_traced_rpc
    )
    return (interceptor,)


def client_interceptors() -> tuple[grpc.aio.ClientInterceptor, ...]:
    """A span per call made, its context sent in metadata (none while off)."""
    if _state.provider is None:
        return ()
    from opentelemetry.instrumentation.grpc import aio_client_interceptors

    interceptors = aio_client_interceptors(  # type: ignore[no-untyped-call]
        tracer_provider=_state.provider, filter_=_traced_rpc
    )
    return tuple(interceptors)


# --- the turn's trace context ----------------------------------------------------------


def _carried(context: Context | None = None) -> runner_pb2.TraceContext | None:
    carrier: dict[str, str] = {}
    _propagator().inject(carrier, context=context)
    traceparent = carrier.get("traceparent")
    if not traceparent:
        return None
    tracestate = carrier.get("tracestate", "")
    if len(tracestate) > MAX_TRACESTATE_CHARS:
        tracestate = ""  # W3C: a platform may drop what it cannot carry
    return runner_pb2.TraceContext(traceparent=traceparent, tracestate=tracestate)


def submitted_trace_context(
    metadata: Sequence[tuple[str, str | bytes]] | None,
) -> runner_pb2.TraceContext | None:
    """The trace context a turn accepted now carries in its envelope.

    Tracing on: the current span's (the SubmitTurn server span, itself the
    caller's child when the caller sent a ``traceparent``). Off: the caller's
    ``traceparent`` / ``tracestate`` metadata passed through, so its executor
    can still continue the caller's trace; None when the caller sent none. A
    malformed ``traceparent`` is ignored, as W3C Trace Context says (the turn
    is accepted all the same: it is not part of the request).
    """
    if _state.tracer is not None and _current_span_valid():
        return _carried()
    given = {
        key: value
        for key, value in metadata or ()
        if key in ("traceparent", "tracestate") and isinstance(value, str)
    }
    if "traceparent" not in given:
        return None
    return _carried(_propagator().extract(given))


def context_of(carried: runner_pb2.TraceContext) -> Context | None:
    """The OpenTelemetry context a carried trace context stands for (None if invalid)."""
    carrier = {"traceparent": carried.traceparent}
    if carried.tracestate:
        carrier["tracestate"] = carried.tracestate
    context = _propagator().extract(carrier)
    return context if _current_span_valid(context) else None


def _turn_context(operation_id: str, envelope: bytes) -> Context | None:
    """The turn's submitting context, read from its envelope once per turn."""
    turns = _state.turns
    if operation_id in turns:
        turns.move_to_end(operation_id)
        return turns[operation_id]
    context = None
    try:
        parsed = runner_pb2.TurnEnvelope.FromString(envelope)
    except Exception:  # never fail a turn over its tracing
        log.debug("%s: envelope unreadable for its trace context", operation_id)
    else:
        if parsed.HasField("trace_context"):
            context = context_of(parsed.trace_context)
    turns[operation_id] = context
    if len(turns) > _REMEMBERED_TURNS:
        turns.popitem(last=False)
    return context


def _attributes(operation_id: str, attributes: Mapping[str, str | int]) -> dict[str, str | int]:
    named: dict[str, str | int] = {"turnwire.operation_id": operation_id}
    for key, value in attributes.items():
        named[f"turnwire.{key}"] = value
    return named


def turn_span(
    name: str, operation_id: str, envelope: bytes, **attributes: str | int
) -> AbstractContextManager[object]:
    """A span about one turn, the child of the call that submitted it (its
    envelope's trace context), whenever and in whichever task it happens.
    Current while it lasts, so RPCs made inside it carry it on. A turn that
    carries no context (accepted while nothing traced it) gets a trace of its
    own in this process, rooted at its first span here. A no-op while off."""
    tracer = _state.tracer
    if tracer is None:
        return _OFF
    named = _attributes(operation_id, attributes)
    parent = _turn_context(operation_id, envelope)
    if parent is not None:
        return tracer.start_as_current_span(name, context=parent, attributes=named)
    from opentelemetry import trace
    from opentelemetry.context import Context

    root = tracer.start_span(name, context=Context(), attributes=named)
    _state.turns[operation_id] = trace.set_span_in_context(root, Context())
    return trace.use_span(root, end_on_exit=True)


def span(name: str, operation_id: str, **attributes: str | int) -> AbstractContextManager[object]:
    """A span about one turn inside the current one (a store write inside the
    Dispatch call, a settlement inside the execution). A no-op while off."""
    tracer = _state.tracer
    if tracer is None:
        return _OFF
    return tracer.start_as_current_span(name, attributes=_attributes(operation_id, attributes))


def _execution_parent(envelope: runner_pb2.TurnEnvelope) -> Context | None:
    """Where a runner's execution span hangs: under the current span (the
    Dispatch call that admitted it) when that continues the turn's trace, else
    under the envelope's context; the current one when the turn carries none."""
    from opentelemetry import trace

    if not envelope.HasField("trace_context"):
        return None
    carried = context_of(envelope.trace_context)
    if carried is None:
        return None
    current = trace.get_current_span().get_span_context()
    turn_trace = trace.get_current_span(carried).get_span_context().trace_id
    return None if current.is_valid and current.trace_id == turn_trace else carried


def traced_execution(
    work: Coroutine[Any, Any, _T],
    name: str,
    envelope: runner_pb2.TurnEnvelope,
    **attributes: str | int,
) -> Coroutine[Any, Any, _T]:
    """``work`` inside a span for the whole execution of a turn on a runner
    (launch, executor, settlement); ``work`` itself while tracing is off."""
    tracer = _state.tracer
    if tracer is None:
        return work
    return _in_span(tracer, work, name, _execution_parent(envelope), attributes, envelope)


async def _in_span(
    tracer: Tracer,
    work: Coroutine[Any, Any, _T],
    name: str,
    parent: Context | None,
    attributes: Mapping[str, str | int],
    envelope: runner_pb2.TurnEnvelope,
) -> _T:
    named = _attributes(envelope.operation_id, attributes)
    with tracer.start_as_current_span(name, context=parent, attributes=named):
        return await work


def executor_trace_context(envelope: runner_pb2.TurnEnvelope) -> tuple[str, str]:
    """(traceparent, tracestate) an executor continues: the runner's current
    span while tracing, else the envelope's as the caller gave it; ("", "")
    when there is none. The process executor sets them as TRACEPARENT and
    TRACESTATE (the OpenTelemetry environment-variable carrier)."""
    if _state.tracer is not None:
        carried = _carried()
        if carried is not None:
            return carried.traceparent, carried.tracestate
    if envelope.HasField("trace_context"):
        return envelope.trace_context.traceparent, envelope.trace_context.tracestate
    return "", ""
