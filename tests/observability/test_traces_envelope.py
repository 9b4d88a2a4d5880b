"""Issue 13, traces: the trace context a turn carries in its envelope, and the
flag that turns tracing on (docs/TRACING.md).

In process and with tracing off in this process (as every service is unless
given --otel-endpoint): TurnService on 127.0.0.1:0 over a real channel, the
in-memory journal. The processes' side is test_traces_processes.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from coordinator_svc.api.acceptance import build_envelope, validate
from coordinator_svc.storage import FakeJournal
from runner_svc.executors.base import ExecutionRequest
from runner_svc.executors.process import command_environment
from tests.coordinator.api.harness import ALICE, serving, submit_request
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.ids import sha256_hex
from turnwire.limits import MessageLimits
from turnwire.observability import tracing
from turnwire.runner.v1 import runner_pb2

GIVEN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _run(scenario: Callable[[FakeJournal], Awaitable[None]]) -> None:
    assert not tracing.enabled()  # these tests are about the services with tracing off
    asyncio.run(scenario(FakeJournal()))


async def _envelope(journal: FakeJournal, operation_id: str) -> runner_pb2.TurnEnvelope:
    record = await journal.get(operation_id)
    assert record is not None
    assert record.envelope_digest == sha256_hex(record.envelope)
    return runner_pb2.TurnEnvelope.FromString(record.envelope)


def test_a_replay_with_another_traceparent_is_a_replay_and_changes_nothing_stored() -> None:
    """PROTOCOL §7: the trace context is not part of the request; the envelope keeps
    the first call's, byte for byte."""

    async def scenario(journal: FakeJournal) -> None:
        async with serving(journal) as h:
            request = submit_request("traced-key")
            first = await h.stub().SubmitTurn(request, metadata=(*ALICE, ("traceparent", GIVEN)))
            stored = await journal.get(first.operation.operation_id)
            again = await h.stub().SubmitTurn(
                request, metadata=(*ALICE, ("traceparent", OTHER), ("tracestate", "k=v"))
            )
            assert again.replayed and not first.replayed
            assert again.operation.operation_id == first.operation.operation_id
            assert await journal.get(first.operation.operation_id) == stored
            carried = (await _envelope(journal, first.operation.operation_id)).trace_context
            assert (carried.traceparent, carried.tracestate) == (GIVEN, "")

    _run(scenario)


def test_a_malformed_traceparent_is_ignored_and_the_turn_accepted() -> None:
    async def scenario(journal: FakeJournal) -> None:
        async with serving(journal) as h:
            reply = await h.stub().SubmitTurn(
                submit_request(), metadata=(*ALICE, ("traceparent", "00-not-a-trace-01"))
            )
            envelope = await _envelope(journal, reply.operation.operation_id)
            assert not envelope.HasField("trace_context")

    _run(scenario)


def test_a_tracestate_longer_than_512_characters_is_dropped_and_the_traceparent_kept() -> None:
    tracestate = ",".join(f"vendor{index:02d}=value-{index:014d}" for index in range(30))
    assert len(tracestate) > tracing.MAX_TRACESTATE_CHARS

    async def scenario(journal: FakeJournal) -> None:
        async with serving(journal) as h:
            metadata = (*ALICE, ("traceparent", GIVEN), ("tracestate", tracestate))
            reply = await h.stub().SubmitTurn(submit_request(), metadata=metadata)
            carried = (await _envelope(journal, reply.operation.operation_id)).trace_context
            assert (carried.traceparent, carried.tracestate) == (GIVEN, "")

    _run(scenario)


def _fits_only_without_a_trace_context() -> coordinator_pb2.SubmitTurnRequest:
    """A request whose envelope is 5 bytes under the limit without a trace context
    (and so over it with one)."""
    limits = MessageLimits()
    carried = runner_pb2.TraceContext(traceparent=GIVEN)

    def request_and_sizes(pad: int) -> tuple[coordinator_pb2.SubmitTurnRequest, int, int]:
        item = turn_pb2.InputItem(item_id="big", content=b"x" * pad)
        request = submit_request(input_items=[item])
        valid = validate(request, 5, limits)
        bare = build_envelope(valid, "op_" + "0" * 32, "alice")
        return request, len(bare), len(build_envelope(valid, "op_" + "0" * 32, "alice", carried))

    probe = limits.max_envelope_bytes - 200
    _, bare, _ = request_and_sizes(probe)
    # Near 4 MiB one more byte of content is one more byte of envelope.
    request, bare, traced = request_and_sizes(probe + limits.max_envelope_bytes - bare - 5)
    assert bare == limits.max_envelope_bytes - 5 and traced > limits.max_envelope_bytes
    return request


def test_a_turn_that_fits_only_without_its_trace_context_is_accepted_without_it() -> None:
    """Tracing never refuses a turn: the envelope goes without the context."""
    request = _fits_only_without_a_trace_context()

    async def scenario(journal: FakeJournal) -> None:
        async with serving(journal) as h:
            reply = await h.stub().SubmitTurn(request, metadata=(*ALICE, ("traceparent", GIVEN)))
            envelope = await _envelope(journal, reply.operation.operation_id)
            assert not envelope.HasField("trace_context")
            assert envelope.ByteSize() <= MessageLimits().max_envelope_bytes

    _run(scenario)


def test_the_flag_takes_only_an_otlp_grpc_url_and_says_why_not() -> None:
    assert tracing.endpoint_url("http://127.0.0.1:4317") == "http://127.0.0.1:4317"
    assert tracing.endpoint_url("https://collector.example:4317/") == (
        "https://collector.example:4317"
    )
    for bad in ("127.0.0.1:4317", "grpc://h:4317", "http://h", "http://h:4318/v1/traces"):
        with pytest.raises(ValueError, match="OTLP/gRPC endpoint"):
            tracing.endpoint_url(bad)


def test_only_a_traces_endpoint_variable_stands_for_the_flag() -> None:
    own = "TURNWIRE_OTEL_ENDPOINT"
    generic = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4317"}
    assert tracing.endpoint_from_env(own, generic) is None
    traces = {**generic, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4317"}
    assert tracing.endpoint_from_env(own, traces) == "http://b:4317"
    assert tracing.endpoint_from_env(own, {**traces, own: "http://c:4317"}) == "http://c:4317"
    disabled = {**traces, own: "http://c:4317", "OTEL_SDK_DISABLED": "true"}
    assert tracing.endpoint_from_env(own, disabled) is None


def test_a_subprocess_gets_the_turns_trace_context_and_never_the_runners_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRACEPARENT", OTHER)
    monkeypatch.setenv("TRACESTATE", "runner=own")
    envelope = runner_pb2.TurnEnvelope(operation_id="op_1")

    def request(traceparent: str) -> ExecutionRequest:
        return ExecutionRequest(
            "op_1", "i" * 32, 1, envelope, envelope.SerializeToString(), traceparent=traceparent
        )

    traced = command_environment(request(GIVEN), "marker")
    assert traced["TRACEPARENT"] == GIVEN and "TRACESTATE" not in traced
    untraced = command_environment(request(""), "marker")
    assert "TRACEPARENT" not in untraced and "TRACESTATE" not in untraced
