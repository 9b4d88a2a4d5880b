"""Watch: resume from the last cursor, no event missed or repeated (PROTOCOL.md §7)."""

from __future__ import annotations

import grpc
import pytest

from turnwire.client import OperationState, RetryLater, RetryPolicy, WaitLonger
from turnwire.common.v1 import errors_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.errors import rich_status

from .scripted import GET, WATCH, Scripted, WatchConsumer, event, operation

pytestmark = pytest.mark.timeout(30)
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


def test_watch_resumes_from_the_last_cursor_after_a_dropped_stream() -> None:
    """§7: after a mid-stream UNAVAILABLE the watch reopens with after_sequence = last seen."""
    scripted = Scripted()
    watcher = WatchConsumer(scripted, "op_1")
    call = watcher.call
    _, first, rpc = scripted.take_stream(WATCH)
    rpc.send_response(event(1, "UNSPECIFIED", "QUEUED"))
    rpc.send_response(event(2, "QUEUED", "DISPATCHING"))
    assert watcher.next().sequence == 1 and watcher.next().sequence == 2
    rpc.terminate((), UNAVAILABLE, "connection reset")
    _, second, rpc = scripted.take_stream(WATCH)
    rpc.send_response(event(3, "DISPATCHING", "RUNNING"))
    rpc.send_response(event(4, "RUNNING", "SUCCEEDED"))
    rpc.terminate((), grpc.StatusCode.OK, "")
    events = call.result()
    assert first.after_sequence == 0
    assert second.after_sequence == 2
    assert [e.sequence for e in events] == [1, 2, 3, 4]
    assert events[-1].to_state is OperationState.SUCCEEDED and events[-1].is_terminal


def test_watch_starts_after_the_given_cursor_and_drops_repeats() -> None:
    """§7: events at or before the cursor are never delivered twice, even if resent."""
    scripted = Scripted()
    call = scripted.start(lambda client: list(client.watch("op_1", after_sequence=2)))
    _, request, rpc = scripted.take_stream(WATCH)
    rpc.send_response(event(2, "QUEUED", "DISPATCHING"))
    rpc.send_response(event(3, "DISPATCHING", "RUNNING"))
    rpc.send_response(event(4, "RUNNING", "FAILED", reason="EXECUTOR_FAILED"))
    rpc.terminate((), grpc.StatusCode.OK, "")
    events = call.result()
    assert request.after_sequence == 2
    assert [e.sequence for e in events] == [3, 4]
    assert events[-1].reason == "EXECUTOR_FAILED"


def test_watch_stops_at_the_terminal_event() -> None:
    """The generator ends after the terminal event without reading further."""
    scripted = Scripted()
    call = scripted.start(lambda client: list(client.watch("op_1")))
    _, _, rpc = scripted.take_stream(WATCH)
    rpc.send_response(event(1, "QUEUED", "CANCELLED"))
    events = call.result()
    assert [e.to_state for e in events] == [OperationState.CANCELLED]


def test_watch_reconnects_are_bounded_and_report_the_resume_cursor() -> None:
    """Bounded reconnects: after the policy's attempts it raises RetryLater(resume_after=cursor)."""
    scripted = Scripted(policy=RetryPolicy(attempts=3))
    watcher = WatchConsumer(scripted, "op_1")
    _, _, rpc = scripted.take_stream(WATCH)
    rpc.send_response(event(1, "UNSPECIFIED", "QUEUED"))
    assert watcher.next().sequence == 1
    rpc.terminate((), UNAVAILABLE, "gone")
    cursors = []
    for _ in range(3):
        _, request, rpc = scripted.take_stream(WATCH)
        cursors.append(request.after_sequence)
        rpc.terminate((), UNAVAILABLE, "still gone")
    with pytest.raises(RetryLater) as raised:
        watcher.call.result()
    assert [e.sequence for e in watcher.seen] == [1]
    assert cursors == [1, 1, 1]
    assert raised.value.resume_after == 1


def test_an_event_restores_the_reconnect_budget() -> None:
    """Progress resets the budget: drops separated by events never exhaust it."""
    scripted = Scripted(policy=RetryPolicy(attempts=2))
    watcher = WatchConsumer(scripted, "op_1")
    for sequence in range(1, 5):
        _, request, rpc = scripted.take_stream(WATCH)
        assert request.after_sequence == sequence - 1
        rpc.send_response(event(sequence, "QUEUED", "QUEUED"))
        assert watcher.next().sequence == sequence
        rpc.terminate((), UNAVAILABLE, "flaky")
    _, _, rpc = scripted.take_stream(WATCH)
    rpc.send_response(event(5, "RUNNING", "SUCCEEDED"))
    assert [e.sequence for e in watcher.call.result()] == [1, 2, 3, 4, 5]


def test_wait_returns_the_terminal_operation() -> None:
    """wait: reads the operation, watches from its cursor, returns the terminal state."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.wait("op_1", timeout=60))
    _, _, rpc = scripted.take_unary(GET)
    reply = coordinator_pb2.GetOperationResponse(
        operation=operation("op_1", "RUNNING", last_event_sequence=3)
    )
    rpc.terminate(reply, (), grpc.StatusCode.OK, "")
    _, request, rpc = scripted.take_stream(WATCH)
    rpc.send_response(event(4, "RUNNING", "SUCCEEDED"))
    final = call.result()
    assert request.after_sequence == 3
    assert final.state is OperationState.SUCCEEDED


def test_wait_gives_up_with_the_latest_state_when_time_runs_out() -> None:
    """wait(timeout): past the deadline it raises WaitLonger carrying the last state seen."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.wait("op_1", timeout=5))
    _, _, rpc = scripted.take_unary(GET)
    reply = coordinator_pb2.GetOperationResponse(operation=operation("op_1", "QUEUED"))
    rpc.terminate(reply, (), grpc.StatusCode.OK, "")
    _, _, rpc = scripted.take_stream(WATCH)
    scripted.clock.now += 10
    rpc.terminate((), grpc.StatusCode.DEADLINE_EXCEEDED, "deadline")
    with pytest.raises(WaitLonger) as raised:
        call.result()
    assert raised.value.operation is not None
    assert raised.value.operation.state is OperationState.QUEUED
    assert scripted.pauses == []


def test_watch_reconnects_when_the_coordinator_says_it_is_shutting_down() -> None:
    """§7: a typed UNAVAILABLE/SHUTTING_DOWN ends the stream; the watch resumes from its cursor."""
    scripted = Scripted()
    watcher = WatchConsumer(scripted, "op_1")
    _, _, rpc = scripted.take_stream(WATCH)
    rpc.send_response(event(1, "UNSPECIFIED", "QUEUED"))
    assert watcher.next().sequence == 1
    status = rich_status(UNAVAILABLE, errors_pb2.ERROR_REASON_SHUTTING_DOWN, "reconnect")
    rpc.terminate(status.trailing_metadata, status.code, status.details)
    _, request, rpc = scripted.take_stream(WATCH)
    rpc.send_response(event(2, "QUEUED", "CANCELLED"))
    assert request.after_sequence == 1
    assert [e.sequence for e in watcher.call.result()] == [1, 2]
