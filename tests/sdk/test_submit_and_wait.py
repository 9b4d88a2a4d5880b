"""submit_and_wait: one SubmitAndWatch call instead of submit + wait (issue 10, §7).

The coordinator is played by hand (grpc_testing): what each attempt sends, and
what the client does with each answer.
"""

from __future__ import annotations

import grpc
import pytest

from turnwire.client import (
    FixTheRequest,
    OperationState,
    RetryLater,
    RetryPolicy,
    Turn,
    TurnwireError,
    UseANewIdempotencyKey,
    WaitLonger,
)
from turnwire.common.v1 import errors_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.errors import rich_status

from .scripted import (
    GET,
    SUBMIT,
    SUBMIT_AND_WATCH,
    WATCH,
    Scripted,
    event,
    fail_stream_typed,
    operation,
    submitted_event,
    until_read,
)

pytestmark = pytest.mark.timeout(30)
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
OK = grpc.StatusCode.OK


def test_one_call_submits_and_returns_the_terminal_operation() -> None:
    """Issue 10: a single SubmitAndWatch carries the turn and a fresh key; its stream's
    terminal event ends the call with the operation as of that event (no other call)."""
    scripted = Scripted()
    call = scripted.start(
        lambda client: client.submit_and_wait(items=["hello"], model="builtin/echo")
    )
    metadata, request, rpc = scripted.take_stream(SUBMIT_AND_WATCH)
    rpc.send_response(submitted_event(1, "UNSPECIFIED", "QUEUED"))
    rpc.send_response(submitted_event(2, "QUEUED", "DISPATCHING"))
    rpc.send_response(submitted_event(3, "DISPATCHING", "SUCCEEDED"))
    rpc.terminate((), OK, "")
    final = call.result()
    assert final.state is OperationState.SUCCEEDED and final.operation_id == "op_1"
    assert request.after_sequence == 0
    assert request.submit.idempotency_key.startswith("tw-")
    assert [item.content for item in request.submit.turn.input_items] == [b"hello"]
    assert metadata["authorization"] == "Bearer tok-alice"


def test_a_cut_stream_is_called_again_with_the_same_request_after_the_last_sequence() -> None:
    """§7: after a mid-stream UNAVAILABLE the retry sends the very same submission (same
    key: a replay, never a second operation) with after_sequence = the last event seen."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.submit_and_wait(items=["x"]))
    _, first, rpc = scripted.take_stream(SUBMIT_AND_WATCH)
    rpc.send_response(submitted_event(1, "UNSPECIFIED", "QUEUED"))
    rpc.send_response(submitted_event(2, "QUEUED", "DISPATCHING"))
    until_read(rpc)
    rpc.terminate((), UNAVAILABLE, "connection reset")
    _, second, rpc = scripted.take_stream(SUBMIT_AND_WATCH)
    rpc.send_response(submitted_event(3, "DISPATCHING", "RUNNING", replayed=True))
    rpc.send_response(submitted_event(4, "RUNNING", "SUCCEEDED", replayed=True))
    assert call.result().state is OperationState.SUCCEEDED
    assert second.submit == first.submit
    assert (first.after_sequence, second.after_sequence) == (0, 2)
    assert len(scripted.pauses) == 1


def test_it_asks_for_the_acceptance_and_the_terminal_event_only() -> None:
    """§7, issue 10: submit_and_wait sends terminal_only=true (it returns only the terminal
    operation); a retry after a cut stream asks the same, resuming after the acceptance."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.submit_and_wait(items=["x"]))
    _, first, rpc = scripted.take_stream(SUBMIT_AND_WATCH)
    rpc.send_response(submitted_event(1, "UNSPECIFIED", "QUEUED"))
    until_read(rpc)
    rpc.terminate((), UNAVAILABLE, "connection reset")
    _, second, rpc = scripted.take_stream(SUBMIT_AND_WATCH)
    rpc.send_response(submitted_event(4, "RUNNING", "SUCCEEDED", replayed=True))
    final = call.result()
    assert final.state is OperationState.SUCCEEDED and final.last_event_sequence == 4
    assert (first.terminal_only, second.terminal_only) == (True, True)
    assert (first.after_sequence, second.after_sequence) == (0, 1)
    assert second.submit == first.submit


def test_a_failure_before_any_message_is_retried_from_the_start_with_the_same_key() -> None:
    """§7: UNAVAILABLE or SHUTTING_DOWN before the first message (accepted or not, the
    client cannot tell) is retried with the same key from sequence 0, within the policy."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.submit_and_wait(items=["x"], idempotency_key="k"))
    _, first, rpc = scripted.take_stream(SUBMIT_AND_WATCH)
    rpc.terminate((), UNAVAILABLE, "connection refused")
    _, second, rpc = scripted.take_stream(SUBMIT_AND_WATCH)
    status = rich_status(UNAVAILABLE, errors_pb2.ERROR_REASON_SHUTTING_DOWN, "reconnect")
    rpc.terminate(status.trailing_metadata, status.code, status.details)
    _, third, rpc = scripted.take_stream(SUBMIT_AND_WATCH)
    rpc.send_response(submitted_event(1, "UNSPECIFIED", "CANCELLED", replayed=True))
    assert call.result().state is OperationState.CANCELLED
    assert {r.submit.idempotency_key for r in (first, second, third)} == {"k"}
    assert [r.after_sequence for r in (first, second, third)] == [0, 0, 0]


def test_retries_are_bounded_and_give_up_with_retry_later() -> None:
    """Bounded: attempts=2 makes two calls, then RetryLater; the turn is not cancelled."""
    scripted = Scripted(policy=RetryPolicy(attempts=2))
    call = scripted.start(lambda client: client.submit_and_wait(items=["x"]))
    for _ in range(2):
        _, _, rpc = scripted.take_stream(SUBMIT_AND_WATCH)
        rpc.terminate((), UNAVAILABLE, "gone")
    with pytest.raises(RetryLater) as raised:
        call.result()
    assert raised.value.code is UNAVAILABLE
    assert len(scripted.pauses) == 1


@pytest.mark.parametrize(
    ("code", "reason", "expected"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, errors_pb2.ERROR_REASON_TURN_INVALID, FixTheRequest),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            errors_pb2.ERROR_REASON_IDEMPOTENCY_KEY_REUSED,
            UseANewIdempotencyKey,
        ),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, errors_pb2.ERROR_REASON_QUOTA_EXCEEDED, RetryLater),
    ],
)
def test_a_refusal_is_raised_typed_and_never_retried(
    code: grpc.StatusCode, reason: errors_pb2.ErrorReason.ValueType, expected: type[TurnwireError]
) -> None:
    """§7: a refusal (nothing stored) raises submit's exception at once: no retry."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.submit_and_wait(items=["x"]))
    _, _, rpc = scripted.take_stream(SUBMIT_AND_WATCH)
    fail_stream_typed(rpc, code, reason, "refused")
    with pytest.raises(expected) as raised:
        call.result()
    assert raised.value.code is code
    assert scripted.pauses == []


def test_a_timeout_raises_wait_longer_with_the_latest_state() -> None:
    """As wait: past ``timeout`` it raises WaitLonger carrying the last operation seen."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.submit_and_wait(items=["x"], timeout=5))
    _, _, rpc = scripted.take_stream(SUBMIT_AND_WATCH)
    rpc.send_response(submitted_event(1, "UNSPECIFIED", "QUEUED"))
    until_read(rpc)
    scripted.clock.now += 10
    rpc.terminate((), grpc.StatusCode.DEADLINE_EXCEEDED, "deadline")
    with pytest.raises(WaitLonger) as raised:
        call.result()
    assert raised.value.operation is not None
    assert raised.value.operation.operation_id == "op_1"
    assert raised.value.operation.state is OperationState.QUEUED


def test_a_coordinator_without_submit_and_watch_gets_submit_turn_then_a_watch() -> None:
    """An older coordinator answers UNIMPLEMENTED (it did nothing): the client submits
    with the same key, then waits as ``wait`` does."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.submit_and_wait(items=["x"], idempotency_key="k"))
    _, _, rpc = scripted.take_stream(SUBMIT_AND_WATCH)
    rpc.terminate((), grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
    _, submitted, rpc = scripted.take_unary(SUBMIT)
    reply = coordinator_pb2.SubmitTurnResponse(operation=operation("op_9"))
    rpc.terminate(reply, (), OK, "")
    _, got, rpc = scripted.take_unary(GET)
    running = operation("op_9", "RUNNING", last_event_sequence=3)
    rpc.terminate(coordinator_pb2.GetOperationResponse(operation=running), (), OK, "")
    _, watched, rpc = scripted.take_stream(WATCH)
    rpc.send_response(event(4, "RUNNING", "SUCCEEDED", operation_id="op_9"))
    final = call.result()
    assert submitted.idempotency_key == "k"
    assert (got.operation_id, watched.after_sequence) == ("op_9", 3)
    assert final.state is OperationState.SUCCEEDED and final.operation_id == "op_9"


def test_a_turn_and_keyword_fields_together_are_refused_before_any_call() -> None:
    """As submit: a Turn or its fields, not both (TypeError, nothing sent)."""
    scripted = Scripted()
    call = scripted.start(
        lambda client: client.submit_and_wait(Turn.build(items=["x"]), items=["y"])
    )
    with pytest.raises(TypeError):
        call.result()
