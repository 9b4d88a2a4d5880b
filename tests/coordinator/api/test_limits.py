"""SubmitTurn and the message-size chain (turnwire.limits, README "Message limits"):
the coordinator accepts no turn whose Dispatch its runners could not receive."""

from __future__ import annotations

import grpc

from coordinator_svc.ports import Journal
from tests.coordinator.api.conftest import Store
from tests.coordinator.api.harness import ALICE, serving, submit_request, typed_error
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.ids import sha256_hex
from turnwire.limits import (
    DEFAULT_RUNNER_MAX_RECEIVE_BYTES,
    DISPATCH_FRAMING_BYTES,
    MessageLimits,
    parse_byte_count,
)
from turnwire.runner.v1 import runner_pb2


def request_of(size: int) -> coordinator_pb2.SubmitTurnRequest:
    """A SubmitTurnRequest of exactly ``size`` bytes (one padded input item)."""
    for pad in range(size, size - 64, -1):  # bounded: the length prefix grows with the pad
        request = submit_request(input_items=[turn_pb2.InputItem(item_id="big", content=b"")])
        base = request.ByteSize()
        request.turn.input_items[0].content = b"x" * max(0, pad - base)
        if request.ByteSize() == size:
            return request
    raise AssertionError(f"no request of exactly {size} bytes")


def worst_case_dispatch(envelope: bytes) -> runner_pb2.DispatchRequest:
    """The biggest Dispatch any attempt of this envelope can be."""
    return runner_pb2.DispatchRequest(
        operation_id="o" * 255,
        envelope=envelope,
        envelope_digest=sha256_hex(envelope),
        expected_incarnation_id="a" * 32,
        fencing_token=2**64 - 1,
        attempt=2**32 - 1,
        dispatch_stamp=2**64 - 1,
    )


def test_four_mib_of_turn_is_refused_because_its_dispatch_cannot_fit(store: Store) -> None:
    """Exactly 4 MiB of request was accepted, and its Dispatch (4,194,464 bytes) could
    never reach a runner: now INVALID_ARGUMENT / TURN_INVALID, and nothing is stored."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            request = request_of(4 * 1024 * 1024)
            error = await typed_error(h.stub().SubmitTurn(request, metadata=ALICE))
            assert error.code == grpc.StatusCode.INVALID_ARGUMENT
            assert error.reason == "TURN_INVALID"
            assert error.metadata == {"field": "turn"}
            assert journal.commits == 0

    store.run(scenario)


def test_largest_accepted_envelope_fits_the_runner_with_any_dispatch_framing(
    store: Store,
) -> None:
    """The chain: what SubmitTurn accepts, any Dispatch of it fits the runner limit."""
    limits = MessageLimits()

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            request = request_of(limits.max_envelope_bytes - 300)
            reply = await h.stub().SubmitTurn(request, metadata=ALICE)
            record = await journal.get(reply.operation.operation_id)
            assert record is not None and len(record.envelope) <= limits.max_envelope_bytes
            biggest = worst_case_dispatch(b"e" * limits.max_envelope_bytes)
            assert biggest.ByteSize() <= DEFAULT_RUNNER_MAX_RECEIVE_BYTES

    store.run(scenario)


def test_limits_derive_from_the_runner_receive_limit() -> None:
    """One number configures the chain; each link leaves room for the next."""
    limits = MessageLimits(8 * 1024 * 1024)
    assert limits.dispatch_max_send_bytes == 8 * 1024 * 1024
    assert limits.max_envelope_bytes == 8 * 1024 * 1024 - DISPATCH_FRAMING_BYTES
    assert limits.max_envelope_bytes < limits.max_submit_request_bytes
    assert limits.max_submit_request_bytes < limits.coordinator_max_receive_bytes
    framing = worst_case_dispatch(b"").ByteSize()
    assert framing + 8 <= DISPATCH_FRAMING_BYTES  # 8: the envelope's tag and length
    assert parse_byte_count("4M") == parse_byte_count("4MiB") == 4 * 1024 * 1024
    assert parse_byte_count("4096K") == 4 * 1024 * 1024
    assert parse_byte_count("65536") == 65536
