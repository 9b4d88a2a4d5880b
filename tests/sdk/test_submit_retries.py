"""Submit: idempotency keys and safe, bounded retries (PROTOCOL.md §7)."""

from __future__ import annotations

import grpc
import pytest

from turnwire.client import RetryLater, RetryPolicy, Turn
from turnwire.common.v1 import errors_pb2
from turnwire.coordinator.v1 import coordinator_pb2

from .scripted import SUBMIT, Scripted, fail_typed, fail_unary, operation

pytestmark = pytest.mark.timeout(30)


def _accepted(replayed: bool) -> coordinator_pb2.SubmitTurnResponse:
    return coordinator_pb2.SubmitTurnResponse(operation=operation("op_7"), replayed=replayed)


def test_lost_reply_is_retried_with_the_same_key_and_returns_the_same_operation() -> None:
    """§7: after UNAVAILABLE the retry carries the same idempotency key; the replay is returned."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.submit(items=["hello"], model="builtin/echo"))
    _, first, rpc = scripted.take_unary(SUBMIT)
    fail_unary(rpc, grpc.StatusCode.UNAVAILABLE, "connection reset by peer")
    _, second, rpc = scripted.take_unary(SUBMIT)
    rpc.terminate(_accepted(replayed=True), (), grpc.StatusCode.OK, "")
    submission = call.result()
    assert second.idempotency_key == first.idempotency_key
    assert second.turn == first.turn
    assert submission.idempotency_key == first.idempotency_key
    assert submission.replayed is True
    assert submission.operation.operation_id == "op_7"
    assert len(scripted.pauses) == 1


@pytest.mark.rule("C7")
def test_deadline_exceeded_is_retried_with_the_same_key() -> None:
    """C7 seen from the client: a timeout is not a refusal, so the same key is sent again."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.submit(items=["x"], idempotency_key="k-1"))
    _, first, rpc = scripted.take_unary(SUBMIT)
    fail_unary(rpc, grpc.StatusCode.DEADLINE_EXCEEDED)
    _, second, rpc = scripted.take_unary(SUBMIT)
    rpc.terminate(_accepted(replayed=False), (), grpc.StatusCode.OK, "")
    assert call.result().idempotency_key == "k-1"
    assert first.idempotency_key == second.idempotency_key == "k-1"


def test_journal_unavailable_is_retried_with_the_same_key() -> None:
    """§7: JOURNAL_UNAVAILABLE changed nothing, so the same request is safe to send again."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.submit(items=["x"]))
    _, first, rpc = scripted.take_unary(SUBMIT)
    fail_typed(rpc, grpc.StatusCode.UNAVAILABLE, errors_pb2.ERROR_REASON_JOURNAL_UNAVAILABLE, "db")
    _, second, rpc = scripted.take_unary(SUBMIT)
    rpc.terminate(_accepted(replayed=False), (), grpc.StatusCode.OK, "")
    call.result()
    assert second.idempotency_key == first.idempotency_key


def test_retries_stop_after_the_attempt_bound() -> None:
    """Retries are bounded: attempts=3 makes exactly 3 calls, then RetryLater."""
    scripted = Scripted(policy=RetryPolicy(attempts=3))
    call = scripted.start(lambda client: client.submit(items=["x"]))
    keys = set()
    for _ in range(3):
        _, request, rpc = scripted.take_unary(SUBMIT)
        keys.add(request.idempotency_key)
        fail_unary(rpc, grpc.StatusCode.UNAVAILABLE)
    with pytest.raises(RetryLater) as raised:
        call.result()
    assert raised.value.code is grpc.StatusCode.UNAVAILABLE
    assert raised.value.reason == ""
    assert len(keys) == 1
    assert len(scripted.pauses) == 2


def test_retries_stop_when_the_time_budget_is_spent() -> None:
    """Retries are bounded in time: a pause that would pass total_seconds is not taken."""
    policy = RetryPolicy(
        attempts=100, initial_backoff=1.0, max_backoff=1.0, jitter=0.0, total_seconds=2.5
    )
    scripted = Scripted(policy=policy)
    call = scripted.start(lambda client: client.submit(items=["x"]))
    for _ in range(3):
        _, _, rpc = scripted.take_unary(SUBMIT)
        fail_unary(rpc, grpc.StatusCode.UNAVAILABLE)
    with pytest.raises(RetryLater):
        call.result()
    assert sum(scripted.pauses) <= 2.5
    assert len(scripted.pauses) == 2


def test_backoff_grows_and_is_jittered_within_bounds() -> None:
    """Backoff: each pause lies in [(1 - jitter) * ceiling, ceiling], the ceiling doubling."""
    policy = RetryPolicy(attempts=4, initial_backoff=0.1, max_backoff=0.3, jitter=0.5)
    scripted = Scripted(policy=policy)
    call = scripted.start(lambda client: client.submit(items=["x"]))
    for _ in range(4):
        _, _, rpc = scripted.take_unary(SUBMIT)
        fail_unary(rpc, grpc.StatusCode.UNAVAILABLE)
    with pytest.raises(RetryLater):
        call.result()
    ceilings = [0.1, 0.2, 0.3]
    assert len(scripted.pauses) == 3
    for pause, ceiling in zip(scripted.pauses, ceilings, strict=True):
        assert ceiling / 2 <= pause <= ceiling


def test_a_fresh_key_is_made_per_submit_when_none_is_given() -> None:
    """§1: every submit carries a key; two calls without one get two different keys."""
    scripted = Scripted()
    keys = []
    for _ in range(2):
        call = scripted.start(lambda client: client.submit(Turn.build(items=["x"])))
        _, request, rpc = scripted.take_unary(SUBMIT)
        rpc.terminate(_accepted(replayed=False), (), grpc.StatusCode.OK, "")
        keys.append(call.result().idempotency_key)
        assert request.idempotency_key == keys[-1]
    assert keys[0] != keys[1]
    assert all(key.startswith("tw-") and 1 <= len(key) <= 255 for key in keys)


def test_the_token_travels_as_bearer_metadata() -> None:
    """§7: every call is authenticated with `authorization: Bearer <token>`."""
    scripted = Scripted(token="s3cret")
    call = scripted.start(lambda client: client.submit(items=["x"]))
    metadata, _, rpc = scripted.take_unary(SUBMIT)
    rpc.terminate(_accepted(replayed=False), (), grpc.StatusCode.OK, "")
    call.result()
    assert metadata["authorization"] == "Bearer s3cret"


def test_the_turn_fields_reach_the_wire() -> None:
    """The keyword form builds the wire Turn: items, model, parameters, kind, pool, policy."""
    scripted = Scripted()
    call = scripted.start(
        lambda client: client.submit(
            items=["hello"],
            model="builtin/sleep",
            parameters={"sleep_ms": "500"},
            kind="read-only",
            pool="gpu",
            replay_policy="never-automatic",
            max_attempts=3,
            budget_ms=900,
        )
    )
    _, request, rpc = scripted.take_unary(SUBMIT)
    rpc.terminate(_accepted(replayed=False), (), grpc.StatusCode.OK, "")
    call.result()
    turn = request.turn
    assert [item.content for item in turn.input_items] == [b"hello"]
    assert (turn.model.provider, turn.model.name) == ("builtin", "sleep")
    assert dict(turn.model.parameters) == {"sleep_ms": "500"}
    assert turn.kind == 2 and turn.pool == "gpu" and turn.replay_policy == 2
    assert turn.max_attempts == 3 and turn.limits.budget_ms == 900
