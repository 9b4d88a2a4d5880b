"""SubmitTurn through a real server: acceptance (C1), idempotency (§7), validation."""

from __future__ import annotations

import asyncio
import hashlib

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from coordinator_svc.core.model import Execution, OpState, ReplayPolicy
from coordinator_svc.ports import Journal
from coordinator_svc.storage import FakeJournal
from tests.coordinator.api.conftest import Store
from tests.coordinator.api.harness import (
    ALICE,
    BOB,
    FakeDispatch,
    serving,
    submit_request,
    typed_error,
)
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.runner.v1 import runner_pb2


async def _snapshot(journal: Journal, operation_id: str) -> tuple[object, int, int]:
    record = await journal.get(operation_id)
    events = await journal.events(operation_id, 0, 100)
    assert record is not None
    return record, record.version, len(events)


@pytest.mark.rule("C1")
def test_submit_persists_operation_envelope_and_first_event(store: Store) -> None:
    """C1: the reply comes after operation, envelope and event 1 are durable."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            reply = await h.stub().SubmitTurn(submit_request(), metadata=ALICE)
            op = reply.operation
            assert not reply.replayed
            assert op.state == coordinator_pb2.OPERATION_STATE_QUEUED
            assert op.execution == turn_pb2.EXECUTION_NOT_STARTED
            assert op.last_event_sequence == 1
            record = await journal.get(op.operation_id)
            assert record is not None and record.state is OpState.QUEUED
            assert record.envelope_digest == hashlib.sha256(record.envelope).hexdigest()
            assert op.envelope_digest == record.envelope_digest
            events = await journal.events(op.operation_id, 0, 10)
            assert [(e.sequence, e.from_state, e.to_state) for e in events] == [
                (1, None, OpState.QUEUED)
            ]
            assert h.dispatch.woken == [op.operation_id]

    store.run(scenario)


def test_envelope_holds_the_turn_and_principal_and_no_raw_key(store: Store) -> None:
    """§1: the envelope is the turn as the runner will see it, built once at acceptance."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            limits = turn_pb2.Limits(deadline=Timestamp(seconds=1_900_000_000), budget_ms=1500)
            request = submit_request("secret-key-xyz", pool="", max_attempts=0, limits=limits)
            op = (await h.stub().SubmitTurn(request, metadata=ALICE)).operation
            record = await journal.get(op.operation_id)
            assert record is not None
            envelope = runner_pb2.TurnEnvelope.FromString(record.envelope)
            assert envelope.operation_id == op.operation_id
            assert envelope.principal == "alice"
            assert envelope.routing.pool == "default"
            assert envelope.model == request.turn.model
            assert list(envelope.input_items) == list(request.turn.input_items)
            assert dict(envelope.item_metadata) == dict(request.turn.item_metadata)
            assert envelope.kind == turn_pb2.TURN_KIND_WRITABLE
            assert envelope.limits == limits
            assert envelope.replay_policy == turn_pb2.REPLAY_POLICY_PROBE_FIRST
            assert record.envelope == envelope.SerializeToString(deterministic=True)
            assert record.replay_policy is ReplayPolicy.PROBE_FIRST
            assert record.max_attempts == 5
            assert "secret-key-xyz" not in repr(record)

    store.run(scenario)


def test_same_key_same_request_returns_same_operation_and_changes_nothing(
    idem_store: Store,
) -> None:
    """§7: a repeated submit is a replay: same operation, replayed=true, no write."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            first = await stub.SubmitTurn(submit_request("k"), metadata=ALICE)
            op_id = first.operation.operation_id
            before = await _snapshot(journal, op_id)
            second = await stub.SubmitTurn(submit_request("k"), metadata=ALICE)
            assert second.replayed
            assert second.operation == first.operation
            assert await _snapshot(journal, op_id) == before
            listed = await stub.ListOperations(
                coordinator_pb2.ListOperationsRequest(), metadata=ALICE
            )
            assert [o.operation_id for o in listed.operations] == [op_id]

    idem_store.run(scenario)


def test_same_key_different_request_is_refused_and_changes_nothing(idem_store: Store) -> None:
    """§7: IDEMPOTENCY_KEY_REUSED (FAILED_PRECONDITION); the journal is unchanged."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            first = await stub.SubmitTurn(submit_request("k"), metadata=ALICE)
            op_id = first.operation.operation_id
            before = await _snapshot(journal, op_id)
            other = submit_request("k", item_metadata={"changed": "yes"})
            error = await typed_error(stub.SubmitTurn(other, metadata=ALICE))
            assert error.code == grpc.StatusCode.FAILED_PRECONDITION
            assert error.reason == "IDEMPOTENCY_KEY_REUSED"
            assert await _snapshot(journal, op_id) == before
            listed = await stub.ListOperations(
                coordinator_pb2.ListOperationsRequest(), metadata=ALICE
            )
            assert len(listed.operations) == 1

    idem_store.run(scenario)


@pytest.mark.rule("C1")
def test_concurrent_submits_with_one_key_make_one_operation(idem_store: Store) -> None:
    """C1/§7: two racing submits with one key over two channels make one operation."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stubs = [h.stub() for _ in range(4)]
            replies = await asyncio.gather(
                *(s.SubmitTurn(submit_request("race"), metadata=ALICE) for s in stubs)
            )
            assert len({r.operation.operation_id for r in replies}) == 1
            assert sorted(r.replayed for r in replies) == [False, True, True, True], replies
            listed = await stubs[0].ListOperations(
                coordinator_pb2.ListOperationsRequest(), metadata=ALICE
            )
            assert len(listed.operations) == 1

    idem_store.run(scenario)


def test_idempotency_key_is_scoped_to_the_principal(store: Store) -> None:
    """§1: keys are unique per principal; two principals' equal keys are two operations."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            a = await stub.SubmitTurn(submit_request("same"), metadata=ALICE)
            b = await stub.SubmitTurn(submit_request("same"), metadata=BOB)
            assert not a.replayed and not b.replayed
            assert a.operation.operation_id != b.operation.operation_id

    store.run(scenario)


@pytest.mark.parametrize("key", ["", "x" * 256, "bad\nkey", "tab\tkey", "\x00"])
def test_invalid_idempotency_key_is_refused_and_stores_nothing(store: Store, key: str) -> None:
    """§1: the key is required, 1..255 printable chars; else IDEMPOTENCY_KEY_INVALID."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            error = await typed_error(stub.SubmitTurn(submit_request(key), metadata=ALICE))
            assert error.code == grpc.StatusCode.INVALID_ARGUMENT
            assert error.reason == "IDEMPOTENCY_KEY_INVALID"
            assert error.metadata == {"field": "idempotency_key"}
            listed = await stub.ListOperations(
                coordinator_pb2.ListOperationsRequest(), metadata=ALICE
            )
            assert len(listed.operations) == 0
            assert journal.commits == 0

    store.run(scenario)


def _too_many_items() -> coordinator_pb2.SubmitTurnRequest:
    request = submit_request()
    del request.turn.input_items[:]
    request.turn.input_items.extend(turn_pb2.InputItem(item_id=str(i)) for i in range(1001))
    return request


def _no_turn() -> coordinator_pb2.SubmitTurnRequest:
    return coordinator_pb2.SubmitTurnRequest(idempotency_key="k")


def _oversized() -> coordinator_pb2.SubmitTurnRequest:
    big = turn_pb2.InputItem(item_id="big", content=b"x" * (4 * 1024 * 1024 + 100))
    return submit_request(input_items=[big])


INVALID_TURNS = {
    "missing turn": (_no_turn, "turn"),
    "kind unspecified": (
        lambda: submit_request(kind=turn_pb2.TURN_KIND_UNSPECIFIED),
        "turn.kind",
    ),
    "kind unknown number": (lambda: submit_request(kind=99), "turn.kind"),
    "replay policy unknown number": (
        lambda: submit_request(replay_policy=42),
        "turn.replay_policy",
    ),
    "max_attempts over 100": (lambda: submit_request(max_attempts=101), "turn.max_attempts"),
    "1001 input items": (_too_many_items, "turn.input_items"),
    "request over 4 MiB": (_oversized, "turn"),
    "pool with newline": (lambda: submit_request(pool="a\nb"), "turn.pool"),
    "deadline nanos out of range": (
        lambda: submit_request(
            limits=turn_pb2.Limits(deadline=Timestamp(seconds=1_800_000_000, nanos=10**9))
        ),
        "turn.limits.deadline",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID_TURNS))
def test_invalid_turn_is_refused_naming_the_field_and_stores_nothing(
    store: Store, case: str
) -> None:
    """§7: a malformed turn is INVALID_ARGUMENT / TURN_INVALID with the field; no write."""
    make, field = INVALID_TURNS[case]

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            error = await typed_error(h.stub().SubmitTurn(make(), metadata=ALICE))
            assert error.code == grpc.StatusCode.INVALID_ARGUMENT
            assert error.reason == "TURN_INVALID"
            assert error.metadata == {"field": field}
            assert journal.commits == 0

    store.run(scenario)


def test_turn_for_a_pool_no_runner_serves_is_refused_and_stores_nothing(store: Store) -> None:
    """§7: NO_RUNNER_FOR_TURN (FAILED_PRECONDITION) before anything is stored."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            error = await typed_error(
                h.stub().SubmitTurn(submit_request(pool="gpu"), metadata=ALICE)
            )
            assert error.code == grpc.StatusCode.FAILED_PRECONDITION
            assert error.reason == "NO_RUNNER_FOR_TURN"
            assert journal.commits == 0
            assert h.dispatch.woken == []

    store.run(scenario)


def test_explicit_fields_are_kept_and_defaults_fill_the_rest(store: Store) -> None:
    """§3: replay policy and max_attempts as submitted; 0 -> configured default."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal, default_max_attempts=7) as h:
            stub = h.stub()
            safe = await stub.SubmitTurn(
                submit_request(
                    "a",
                    replay_policy=turn_pb2.REPLAY_POLICY_SAFE,
                    max_attempts=3,
                    kind=turn_pb2.TURN_KIND_READ_ONLY,
                ),
                metadata=ALICE,
            )
            plain = await stub.SubmitTurn(submit_request("b"), metadata=ALICE)
            assert safe.operation.replay_policy == turn_pb2.REPLAY_POLICY_SAFE
            assert safe.operation.max_attempts == 3
            assert safe.operation.kind == turn_pb2.TURN_KIND_READ_ONLY
            assert plain.operation.replay_policy == turn_pb2.REPLAY_POLICY_PROBE_FIRST
            assert plain.operation.max_attempts == 7
            assert plain.operation.pool == "default"

    store.run(scenario)


def test_submit_fails_closed_when_the_journal_is_unavailable() -> None:
    """Fail closed: JournalUnavailable -> UNAVAILABLE / JOURNAL_UNAVAILABLE, no dispatch."""

    async def scenario() -> None:
        journal = FakeJournal()
        dispatch = FakeDispatch(journal)
        async with serving(journal, dispatch=dispatch) as h:
            journal.set_available(False)
            error = await typed_error(h.stub().SubmitTurn(submit_request(), metadata=ALICE))
            assert error.code == grpc.StatusCode.UNAVAILABLE
            assert error.reason == "JOURNAL_UNAVAILABLE"
            assert dispatch.woken == []
            journal.set_available(True)
            assert journal.commits == 0

    asyncio.run(scenario())


def test_submit_reply_reports_queued_not_started_record_fields(store: Store) -> None:
    """§7: the reply's Operation is the stored record converted (typed status)."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            op = (await h.stub().SubmitTurn(submit_request(), metadata=ALICE)).operation
            record = await journal.get(op.operation_id)
            assert record is not None
            assert record.execution is Execution.NOT_STARTED
            assert op.created_at.ToDatetime().replace(microsecond=0) == record.created_at.replace(
                tzinfo=None, microsecond=0
            )
            assert op.attempt_count == 0 and op.runner == "" and not op.cancel_requested

    store.run(scenario)
