"""get, list, cancel: typed results, never protobufs (PROTOCOL.md §7)."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc
import pytest

from turnwire.client import Execution, OperationState, StopReason
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2

from .scripted import CANCEL, GET, LIST, Scripted, operation

pytestmark = pytest.mark.timeout(30)
OK = grpc.StatusCode.OK


def test_get_returns_a_typed_operation() -> None:
    """§7: status is typed: state, execution, attempts, runner, result, timestamps as datetime."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.get("op_1"))
    message = operation(
        "op_1",
        "SUCCEEDED",
        execution=turn_pb2.EXECUTION_STARTED,
        attempt_count=2,
        runner="r1",
        incarnation_id="a" * 32,
        result=turn_pb2.TurnResult(output=b"hi", content_type="text/plain"),
    )
    message.created_at.FromDatetime(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    _, _, rpc = scripted.take_unary(GET)
    rpc.terminate(coordinator_pb2.GetOperationResponse(operation=message), (), OK, "")
    op = call.result()
    assert op.state is OperationState.SUCCEEDED and op.execution is Execution.STARTED
    assert (op.attempt_count, op.runner, op.incarnation_id) == (2, "r1", "a" * 32)
    assert op.result is not None and op.result.output == b"hi"
    assert op.error is None
    assert op.created_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert op.finished_at is None


@pytest.mark.rule("C11")
def test_cancel_shows_when_cancel_lost_the_race() -> None:
    """C11: a turn that finished first stays SUCCEEDED; cancel_lost_race says so."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.cancel("op_1"))
    message = operation(
        "op_1", "SUCCEEDED", cancel_requested=True, stop_reason=turn_pb2.STOP_REASON_CANCEL
    )
    _, request, rpc = scripted.take_unary(CANCEL)
    rpc.terminate(coordinator_pb2.CancelOperationResponse(operation=message), (), OK, "")
    op = call.result()
    assert request.operation_id == "op_1"
    assert op.cancel_lost_race is True
    assert op.stop_reason is StopReason.CANCEL


def test_list_walks_every_page_with_the_server_token() -> None:
    """list yields one page per call, passing next_page_token until it is empty."""
    scripted = Scripted()
    call = scripted.start(
        lambda client: list(client.list(states=["running", "QUEUED"], page_size=2))
    )
    _, first, rpc = scripted.take_unary(LIST)
    page = coordinator_pb2.ListOperationsResponse(
        operations=[operation("op_1"), operation("op_2")], next_page_token="t2"
    )
    rpc.terminate(page, (), OK, "")
    _, second, rpc = scripted.take_unary(LIST)
    rpc.terminate(
        coordinator_pb2.ListOperationsResponse(operations=[operation("op_3")]), (), OK, ""
    )
    pages = call.result()
    assert [op.operation_id for p in pages for op in p.operations] == ["op_1", "op_2", "op_3"]
    assert list(first.states) == [
        coordinator_pb2.OPERATION_STATE_RUNNING,
        coordinator_pb2.OPERATION_STATE_QUEUED,
    ]
    assert (first.page_size, first.page_token, second.page_token) == (2, "", "t2")


def test_an_unknown_wire_state_reads_as_unspecified() -> None:
    """A state number this SDK does not know reads as UNSPECIFIED instead of crashing."""
    from turnwire.client import Operation

    op = Operation.from_proto(coordinator_pb2.Operation(operation_id="op_1", state=99))
    assert op.state is OperationState.UNSPECIFIED and not op.is_terminal
