"""Issue 13, traces: where a turn's spans hang (turnwire.observability.tracing),
with a tracer provider that keeps spans in memory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from turnwire.observability import tracing
from turnwire.runner.v1 import runner_pb2

SUBMITTED_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SUBMITTED_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.shutdown()
    assert not tracing.enabled()


def _envelope(operation_id: str, traceparent: str = "") -> bytes:
    envelope = runner_pb2.TurnEnvelope(operation_id=operation_id)
    if traceparent:
        envelope.trace_context.traceparent = traceparent
    return envelope.SerializeToString(deterministic=True)


def _ids(span: ReadableSpan) -> tuple[str, str, str]:
    context = span.get_span_context()
    parent = span.parent.span_id if span.parent is not None else 0
    assert context is not None
    return format(context.trace_id, "032x"), format(context.span_id, "016x"), format(parent, "016x")


def test_every_span_of_a_turn_hangs_under_the_call_that_submitted_it(
    exported: InMemorySpanExporter,
) -> None:
    envelope = _envelope("op_1", f"00-{SUBMITTED_TRACE}-{SUBMITTED_SPAN}-01")
    with tracing.turn_span("turnwire.dispatch", "op_1", envelope, attempt=1):
        pass
    with tracing.turn_span("turnwire.settle", "op_1", envelope):
        pass
    for span in exported.get_finished_spans():
        trace_id, _, parent = _ids(span)
        assert (trace_id, parent) == (SUBMITTED_TRACE, SUBMITTED_SPAN), span.name
    assert exported.get_finished_spans()[0].attributes == {
        "turnwire.operation_id": "op_1",
        "turnwire.attempt": 1,
    }


def test_a_turn_without_a_context_gets_one_trace_rooted_at_its_first_span(
    exported: InMemorySpanExporter,
) -> None:
    envelope = _envelope("op_2")
    with tracing.turn_span("turnwire.preflight", "op_2", envelope):
        pass
    with tracing.turn_span("turnwire.dispatch", "op_2", envelope):
        pass
    first, second = exported.get_finished_spans()
    first_trace, first_span, first_parent = _ids(first)
    second_trace, _, second_parent = _ids(second)
    assert first_parent == "0" * 16
    assert (second_trace, second_parent) == (first_trace, first_span)


def test_an_executor_continues_the_current_span_else_the_envelopes_context(
    exported: InMemorySpanExporter,
) -> None:
    given = f"00-{SUBMITTED_TRACE}-{SUBMITTED_SPAN}-01"
    envelope = runner_pb2.TurnEnvelope(operation_id="op_3")
    envelope.trace_context.traceparent = given
    with tracing.turn_span("turnwire.runner.execute", "op_3", envelope.SerializeToString()):
        traceparent, _ = tracing.executor_trace_context(envelope)
    (execute,) = exported.get_finished_spans()
    trace_id, span_id, _ = _ids(execute)
    assert traceparent.split("-")[1:3] == [trace_id, span_id]
    assert tracing.executor_trace_context(envelope) == (given, "")  # no current span
