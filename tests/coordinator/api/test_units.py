"""Pure parts of the API: digests, conversion tables, page tokens, the error table."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import grpc
import pytest

from coordinator_svc.api import convert
from coordinator_svc.api.acceptance import (
    idempotency_key_digest,
    new_operation,
    request_digest,
    validate,
)
from coordinator_svc.api.errors import ApiError, wire_error
from coordinator_svc.api.paging import decode_page_token, encode_page_token
from coordinator_svc.api.servicer import MAX_PAGE_SIZE, _page_size
from coordinator_svc.core.edges import IllegalTransition
from coordinator_svc.core.model import Execution, OpState, ReplayPolicy, StopReason, TurnKind
from coordinator_svc.ports import (
    IdempotencyKeyReused,
    InvalidWrite,
    JournalNotMigrated,
    JournalUnavailable,
    LeaseLost,
    PageCursor,
    SchemaTooNew,
    StaleVersion,
)
from tests.coordinator.api.harness import submit_request, turn
from turnwire.common.v1 import errors_pb2, turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.errors import reason
from turnwire.runner.v1 import runner_pb2

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def test_request_digest_ignores_map_insertion_order() -> None:
    """§1: request_digest is over the deterministic serialization (maps sorted)."""
    a = turn(item_metadata={"x": "1", "y": "2"})
    b = turn(item_metadata={"y": "2", "x": "1"})
    assert request_digest(a) == request_digest(b)
    assert request_digest(a) != request_digest(turn(item_metadata={"x": "1"}))


def test_idempotency_key_digest_is_per_principal_and_never_the_raw_key() -> None:
    """§1: the key is stored as sha256(principal NUL key), distinct per principal."""
    alice = idempotency_key_digest("alice", "k")
    assert alice != idempotency_key_digest("bob", "k")
    assert alice != idempotency_key_digest("alic", "ek")
    assert len(alice) == 64 and set(alice) <= set("0123456789abcdef")


def test_envelope_is_built_once_and_is_byte_stable() -> None:
    """§1: the same acceptance inputs give the same envelope bytes and digest."""
    request = submit_request()
    valid = validate(request, 5)
    first, _ = new_operation(request, valid, "alice", "op_1", T0)
    second, _ = new_operation(request, valid, "alice", "op_1", T0)
    assert first.envelope == second.envelope
    assert first.envelope_digest == second.envelope_digest
    parsed = runner_pb2.TurnEnvelope.FromString(first.envelope)
    assert parsed.SerializeToString(deterministic=True) == first.envelope


def test_every_state_maps_both_ways_by_name() -> None:
    """The proto <-> record tables cover every value of every enum."""
    for state in OpState:
        assert convert.op_state_from_proto(convert.op_state_to_proto(state)) is state
    assert len(OpState) == len(coordinator_pb2.OperationState.keys()) - 1
    for execution in Execution:
        assert turn_pb2.Execution.Name(convert.execution_to_proto(execution)).endswith(
            execution.value
        )
    for stop in StopReason:
        assert turn_pb2.StopReason.Name(convert.stop_reason_to_proto(stop)).endswith(stop.value)
    for kind in TurnKind:
        assert convert.turn_kind_from_proto(convert.turn_kind_to_proto(kind)) is kind
    for policy in ReplayPolicy:
        assert convert.replay_policy_from_proto(convert.replay_policy_to_proto(policy)) is policy
    with pytest.raises(ValueError):
        convert.op_state_from_proto(coordinator_pb2.OPERATION_STATE_UNSPECIFIED)


def test_terminal_error_fields_become_a_turn_error() -> None:
    """§7: a terminal error has a stable reason and message in Operation.error."""
    request = submit_request()
    record, _ = new_operation(request, validate(request, 5), "alice", "op_1", T0)
    failed = dataclasses.replace(
        record,
        state=OpState.TIMED_OUT,
        execution=Execution.UNKNOWN,
        error_reason="INCARNATION_CHANGED",
        error_message="runner restarted",
    )
    op = convert.operation_to_proto(failed)
    assert op.error.reason == "INCARNATION_CHANGED"
    assert op.error.message == "runner restarted"
    assert op.execution == turn_pb2.EXECUTION_UNKNOWN
    assert not op.HasField("result")


def test_page_size_defaults_to_50_and_is_capped_at_500() -> None:
    """§7: page_size 0 -> 50; anything above 500 -> 500."""
    assert _page_size(0) == 50
    assert _page_size(7) == 7
    assert _page_size(10_000) == MAX_PAGE_SIZE == 500


def test_page_token_round_trips_and_is_bound_to_its_principal() -> None:
    """§7: a token decodes to its cursor for its principal only."""
    cursor = PageCursor(T0, "op_abc")
    token = encode_page_token("alice", cursor)
    assert decode_page_token("alice", token) == cursor
    with pytest.raises(ApiError) as caught:
        decode_page_token("bob", token)
    assert caught.value.reason == errors_pb2.ERROR_REASON_PAGE_TOKEN_INVALID


TABLE = [
    (IdempotencyKeyReused("op_1"), grpc.StatusCode.FAILED_PRECONDITION, "IDEMPOTENCY_KEY_REUSED"),
    (JournalUnavailable("db down"), grpc.StatusCode.UNAVAILABLE, "JOURNAL_UNAVAILABLE"),
    (SchemaTooNew("new"), grpc.StatusCode.UNAVAILABLE, "JOURNAL_UNAVAILABLE"),
    (JournalNotMigrated("old"), grpc.StatusCode.UNAVAILABLE, "JOURNAL_UNAVAILABLE"),
    (StaleVersion("v"), grpc.StatusCode.ABORTED, "JOURNAL_UNAVAILABLE"),
    (LeaseLost("t"), grpc.StatusCode.ABORTED, "JOURNAL_UNAVAILABLE"),
    (
        IllegalTransition("op_1", OpState.SUCCEEDED, OpState.QUEUED),
        grpc.StatusCode.ABORTED,
        "JOURNAL_UNAVAILABLE",
    ),
]


@pytest.mark.parametrize(("exc", "code", "reason_text"), TABLE)
def test_error_table_maps_journal_errors_to_typed_statuses(
    exc: Exception, code: grpc.StatusCode, reason_text: str
) -> None:
    """§7: one table names every failure the same way (fail closed on storage errors)."""
    mapped = wire_error(exc)
    assert mapped is not None
    assert mapped.code == code
    assert reason(mapped.reason) == reason_text
    assert "db down" not in mapped.message  # internals never leak to the client


def test_unexpected_errors_are_not_mapped() -> None:
    """A bug (including InvalidWrite) is INTERNAL without details, never a typed reason."""
    assert wire_error(RuntimeError("boom")) is None
    assert wire_error(InvalidWrite("bad")) is None
