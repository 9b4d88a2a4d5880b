"""SubmitAndWatch: SubmitTurn's acceptance, then WatchOperation's stream, in one call
(issue 10, PROTOCOL.md §7). Real server on 127.0.0.1:0, real channels, real journals."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator_svc.core.model import EventRecord, Execution, OperationRecord, OpState
from coordinator_svc.core.quotas import PrincipalLimits, Quotas
from coordinator_svc.ports import Journal
from coordinator_svc.storage import FakeJournal
from tests.coordinator.api.conftest import Store
from tests.coordinator.api.harness import (
    ALICE,
    FakeDispatch,
    advance,
    bearer,
    rpc_error,
    run_to_success,
    serving,
    submit_request,
    typed_error,
)
from tests.support import runner_access
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from turnwire.errors import TypedError, error_info
from turnwire.testing.stack import Stack

pytestmark = pytest.mark.timeout(60)

_S = coordinator_pb2
STEP_TIMEOUT = 10.0


def _call(
    stub: Any, request: _S.SubmitTurnRequest, after: int = 0, *, terminal_only: bool = False
) -> Any:
    return stub.SubmitAndWatch(
        _S.SubmitAndWatchRequest(submit=request, after_sequence=after, terminal_only=terminal_only),
        metadata=ALICE,
    )


async def _read(call: Any) -> Any:
    return await asyncio.wait_for(call.read(), STEP_TIMEOUT)


async def _drain(call: Any, limit: int = 50) -> list[Any]:
    """Every message until the server ends the stream (bounded)."""
    out = []
    for _ in range(limit):
        message = await _read(call)
        if message is grpc.aio.EOF:
            return out
        out.append(message)
    raise AssertionError("stream did not end")


async def _refusal(call: Any) -> TypedError:
    """The typed status a stream ends with; it must end before any message."""
    try:
        message = await _read(call)
    except grpc.aio.AioRpcError as error:
        info = error_info(error)
        assert info is not None, f"untyped error: {error.code()} {error.details()}"
        return info
    raise AssertionError(f"a message came before the refusal: {message}")


async def _until(condition: Any) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


def _sequences(messages: Sequence[Any]) -> list[int]:
    return [m.event.sequence for m in messages]


def test_streams_the_accepted_turn_from_queued_to_its_terminal_event(store: Store) -> None:
    """§7: the first message is the QUEUED event with the operation (its id) and
    replayed=false; then every event as WatchOperation streams it, ending after the
    terminal one."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            call = _call(stub, submit_request())
            first = await _read(call)
            op_id = first.operation.operation_id
            assert op_id and first.event.operation_id == op_id
            assert (first.event.sequence, first.event.to_state) == (1, _S.OPERATION_STATE_QUEUED)
            assert first.event.from_state == _S.OPERATION_STATE_UNSPECIFIED
            assert first.operation.state == _S.OPERATION_STATE_QUEUED
            assert first.operation.last_event_sequence == 1
            assert first.replayed is False
            assert h.dispatch.woken == [op_id]  # accepted exactly as SubmitTurn accepts
            await run_to_success(journal, op_id)
            h.feed.publish(op_id)
            rest = await _drain(call)
            assert _sequences(rest) == [2, 3, 4]
            assert rest[-1].event.to_state == _S.OPERATION_STATE_SUCCEEDED
            assert rest[-1].operation.result.output == b"done"
            assert all(m.replayed is False for m in rest)
            for message in [first, *rest]:
                assert message.operation.last_event_sequence >= message.event.sequence
            # The same events WatchOperation reads back from the journal, field for field.
            watched = await _drain(
                stub.WatchOperation(_S.WatchOperationRequest(operation_id=op_id), metadata=ALICE)
            )
            assert [m.event for m in watched] == [m.event for m in [first, *rest]]
            assert len(await journal.list_for_principal("alice", [], 10, None)) == 1

    store.run(scenario)


def test_the_same_request_again_is_a_replay_of_the_same_operation(store: Store) -> None:
    """§7: same key + same request = the same operation and its events (replayed=true on
    every message), nothing stored; a key first used by SubmitTurn replays the same way."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            call = _call(stub, submit_request("k1"))
            first = await _read(call)
            op_id = first.operation.operation_id
            await run_to_success(journal, op_id)
            h.feed.publish(op_id)
            original = [first, *await _drain(call)]
            commits = journal.commits
            again = await _drain(_call(stub, submit_request("k1")))
            assert [m.event for m in again] == [m.event for m in original]
            assert {m.operation.operation_id for m in again} == {op_id}
            assert all(m.replayed for m in again)
            assert journal.commits == commits
            assert h.dispatch.woken == [op_id]
            submitted = await stub.SubmitTurn(submit_request("k2"), metadata=ALICE)
            replay = _call(stub, submit_request("k2"))
            head = await _read(replay)
            assert head.replayed and head.operation.operation_id == submitted.operation.operation_id
            assert (head.event.sequence, head.event.to_state) == (1, _S.OPERATION_STATE_QUEUED)
            replay.cancel()
            assert len(await journal.list_for_principal("alice", [], 10, None)) == 2

    store.run(scenario)


def _refused_requests() -> list[tuple[str, str | None, _S.SubmitTurnRequest]]:
    """(reason, ErrorInfo field, request) SubmitTurn refuses with."""
    return [
        ("TURN_INVALID", "turn.kind", submit_request("r1", kind=turn_pb2.TURN_KIND_UNSPECIFIED)),
        ("TURN_INVALID", "turn", _S.SubmitTurnRequest(idempotency_key="r2")),
        ("TURN_INVALID", "turn.max_attempts", submit_request("r3", max_attempts=101)),
        ("IDEMPOTENCY_KEY_INVALID", "idempotency_key", submit_request("")),
        ("IDEMPOTENCY_KEY_INVALID", "idempotency_key", _S.SubmitTurnRequest()),
        ("NO_RUNNER_FOR_TURN", None, submit_request("r4", pool="elsewhere")),
        # Refused at the edge, before the handler (uint64 >= 2^63).
        (
            "TURN_INVALID",
            "turn.limits.budget_ms",
            submit_request("r5", limits=turn_pb2.Limits(budget_ms=2**63)),
        ),
    ]


def test_a_refusal_is_submit_turns_own_before_any_message_and_stores_nothing(
    store: Store,
) -> None:
    """§7: validation, routing and the edge's uint64 check refuse SubmitAndWatch with the
    very status SubmitTurn gives (code, reason, message, ErrorInfo metadata: fields named
    as in SubmitTurnRequest), before any message; nothing is stored."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            for reason, field, request in _refused_requests():
                expected = await typed_error(stub.SubmitTurn(request, metadata=ALICE))
                assert (expected.reason, expected.metadata.get("field")) == (reason, field)
                got = await _refusal(_call(stub, request))
                assert got == expected, (reason, field)
            # The cursor is checked at the edge as WatchOperation's is.
            got = await _refusal(_call(stub, submit_request("r6"), after=2**63))
            assert (got.code, got.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGUMENT_INVALID")
            assert got.metadata["field"] == "after_sequence"
            assert journal.commits == 0
            assert h.dispatch.woken == []

    store.run(scenario)


def test_a_different_request_under_a_used_key_is_refused_like_submit_turn(store: Store) -> None:
    """§7: same key + different request = FAILED_PRECONDITION / IDEMPOTENCY_KEY_REUSED
    (naming the caller's operation), exactly as SubmitTurn says it; nothing changes."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            first = await stub.SubmitTurn(submit_request("k1"), metadata=ALICE)
            commits = journal.commits
            other = submit_request("k1", max_attempts=3)
            expected = await typed_error(stub.SubmitTurn(other, metadata=ALICE))
            got = await _refusal(_call(stub, other))
            assert got == expected
            assert (got.code, got.reason) == (
                grpc.StatusCode.FAILED_PRECONDITION,
                "IDEMPOTENCY_KEY_REUSED",
            )
            assert got.metadata["operation_id"] == first.operation.operation_id
            assert journal.commits == commits

    store.run(scenario)


@pytest.mark.rule("C1")
def test_over_quota_is_refused_like_submit_turn_but_a_replay_is_still_answered(
    store: Store,
) -> None:
    """Issue 9 via SubmitAndWatch: over a limit is RESOURCE_EXHAUSTED / QUOTA_EXCEEDED with
    SubmitTurn's RetryInfo and metadata, nothing stored; the same key and request is still
    answered as a replay (C1 wins over quotas)."""

    async def scenario(journal: Journal) -> None:
        dispatch = FakeDispatch(journal, quotas=Quotas(PrincipalLimits(max_queued=1)))
        async with serving(journal, dispatch=dispatch) as h:
            stub = h.stub()
            accepted = _call(stub, submit_request("k1"))
            op_id = (await _read(accepted)).operation.operation_id
            accepted.cancel()
            expected = await typed_error(stub.SubmitTurn(submit_request("k2"), metadata=ALICE))
            got = await _refusal(_call(stub, submit_request("k3")))
            assert (got.code, got.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED")
            assert (got.metadata, got.retry_after) == (expected.metadata, expected.retry_after)
            assert got.retry_after is not None
            listed = await journal.list_for_principal("alice", [], 10, None)
            assert [r.operation_id for r in listed] == [op_id]
            replay = _call(stub, submit_request("k1"))
            head = await _read(replay)
            assert head.replayed and head.operation.operation_id == op_id
            replay.cancel()

    store.run(scenario)


def test_calling_again_after_a_lost_stream_resumes_after_the_given_sequence(
    store: Store,
) -> None:
    """§7: a client that lost the stream calls again with the same request and
    after_sequence = the last sequence it saw: a replay, and only the later events."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            request = submit_request("k1")
            call = _call(stub, request)
            first = await _read(call)
            op_id = first.operation.operation_id
            await advance(journal, op_id, OpState.DISPATCHING, attempt=True)
            h.feed.publish(op_id)
            second = await _read(call)
            assert second.event.sequence == 2
            call.cancel()  # the stream is lost
            await advance(journal, op_id, OpState.RUNNING, execution=Execution.STARTED)
            await advance(journal, op_id, OpState.SUCCEEDED, execution=Execution.STARTED)
            resumed = await _drain(_call(stub, request, after=2))
            assert _sequences(resumed) == [3, 4]
            assert all(m.replayed and m.operation.operation_id == op_id for m in resumed)
            assert resumed[-1].operation.state == _S.OPERATION_STATE_SUCCEEDED
            assert await _drain(_call(stub, request, after=4)) == []  # after the end: ends
            assert len(await journal.list_for_principal("alice", [], 10, None)) == 1

    store.run(scenario)


def test_terminal_only_streams_the_acceptance_then_only_the_terminal_event(
    store: Store,
) -> None:
    """§7, terminal_only: the acceptance (QUEUED, sequence 1, naming the operation), then
    the terminal event with the terminal operation, then the end; nothing in between.
    A replay from cursor 0 is the same two messages, replayed=true."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            call = _call(stub, submit_request("k1"), terminal_only=True)
            first = await _read(call)
            op_id = first.operation.operation_id
            assert (first.event.sequence, first.event.to_state) == (1, _S.OPERATION_STATE_QUEUED)
            assert first.operation.state == _S.OPERATION_STATE_QUEUED
            assert first.replayed is False
            await run_to_success(journal, op_id)
            h.feed.publish(op_id)
            rest = await _drain(call)
            assert _sequences(rest) == [4]
            last = rest[0]
            assert (last.event.from_state, last.event.to_state) == (
                _S.OPERATION_STATE_RUNNING,
                _S.OPERATION_STATE_SUCCEEDED,
            )
            assert last.operation.state == _S.OPERATION_STATE_SUCCEEDED
            assert last.operation.result.output == b"done"
            assert last.operation.last_event_sequence == 4 and last.replayed is False
            again = await _drain(_call(stub, submit_request("k1"), terminal_only=True))
            assert _sequences(again) == [1, 4]
            assert [m.event for m in again] == [first.event, last.event]
            assert all(m.replayed and m.operation.operation_id == op_id for m in again)
            assert again[-1].operation.state == _S.OPERATION_STATE_SUCCEEDED
            # Without it, the same call still streams every event.
            everything = await _drain(_call(stub, submit_request("k1")))
            assert _sequences(everything) == [1, 2, 3, 4]

    store.run(scenario)


def test_a_resumed_terminal_only_call_gets_just_the_terminal_event(store: Store) -> None:
    """§7, terminal_only with after_sequence: called again after the acceptance's sequence,
    the stream carries only the terminal event (whether the turn ends while the call waits
    or ended before it), and nothing at all from a cursor at or past the end."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            request = submit_request("k1")
            call = _call(stub, request, terminal_only=True)
            op_id = (await _read(call)).operation.operation_id
            call.cancel()  # the stream is lost after the acceptance
            await _until(lambda: h.feed.waiting == 0)
            waiting = _call(stub, request, after=1, terminal_only=True)
            await _until(lambda: h.feed.waiting == 1)  # parked before the turn moves
            await advance(journal, op_id, OpState.DISPATCHING, attempt=True)
            h.feed.publish(op_id)
            await advance(journal, op_id, OpState.RUNNING, execution=Execution.STARTED)
            h.feed.publish(op_id)
            await advance(journal, op_id, OpState.SUCCEEDED, execution=Execution.STARTED)
            h.feed.publish(op_id)
            resumed = await _drain(waiting)
            assert _sequences(resumed) == [4]
            assert resumed[0].replayed and resumed[0].operation.operation_id == op_id
            assert resumed[0].operation.state == _S.OPERATION_STATE_SUCCEEDED
            late = await _drain(_call(stub, request, after=2, terminal_only=True))
            assert [m.event for m in late] == [m.event for m in resumed]
            assert await _drain(_call(stub, request, after=4, terminal_only=True)) == []
            assert len(await journal.list_for_principal("alice", [], 10, None)) == 1

    store.run(scenario)


def test_shutdown_ends_the_stream_with_watch_operations_unavailable(store: Store) -> None:
    """Shutdown: an open SubmitAndWatch ends exactly as an open WatchOperation does
    (UNAVAILABLE / SHUTTING_DOWN), so the client calls again elsewhere."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            call = _call(stub, submit_request())
            op_id = (await _read(call)).operation.operation_id
            watch = stub.WatchOperation(
                _S.WatchOperationRequest(operation_id=op_id, after_sequence=1), metadata=ALICE
            )
            await _until(lambda: h.feed.waiting == 2)  # both parked, waiting for a change
            h.servicer.close()
            got = error_info(await rpc_error(_read(call)))
            expected = error_info(await rpc_error(_read(watch)))
            assert got is not None and got == expected
            assert (got.code, got.reason) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")

    store.run(scenario)


def test_a_client_that_cancels_the_call_does_not_cancel_the_turn(store: Store) -> None:
    """§7: cancelling SubmitAndWatch ends the stream only; the turn stays accepted, no
    cancel is asked for, and it runs to its end."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            call = _call(stub, submit_request())
            op_id = (await _read(call)).operation.operation_id
            await _until(lambda: h.feed.waiting == 1)
            call.cancel()
            await _until(lambda: h.feed.waiting == 0)  # the server let the stream go
            record = await journal.get(op_id)
            assert record is not None
            assert (record.state, record.cancel_requested) == (OpState.QUEUED, False)
            await run_to_success(journal, op_id)
            done = await stub.GetOperation(
                _S.GetOperationRequest(operation_id=op_id), metadata=ALICE
            )
            assert done.operation.state == _S.OPERATION_STATE_SUCCEEDED

    store.run(scenario)


class _ReadLog(FakeJournal):
    """The in-memory journal, noting which reads the servicer makes."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, int]] = []

    async def get_for_principal(self, principal: str, operation_id: str) -> OperationRecord | None:
        self.reads.append(("get_for_principal", 0))
        return await super().get_for_principal(principal, operation_id)

    async def events(self, operation_id: str, after_sequence: int, limit: int) -> list[EventRecord]:
        self.reads.append(("events", after_sequence))
        return await super().events(operation_id, after_sequence, limit)


def test_the_accepted_operation_is_streamed_without_reading_it_back() -> None:
    """Issue 10: the call that stored the operation needs no ownership read, and sends
    its QUEUED event as stored: no read of the event log ever starts before sequence 1."""

    async def scenario() -> None:
        journal = _ReadLog()
        async with serving(journal) as h:
            stub = h.stub()
            call = _call(stub, submit_request())
            op_id = (await _read(call)).operation.operation_id
            await run_to_success(journal, op_id)
            h.feed.publish(op_id)
            assert _sequences(await _drain(call)) == [2, 3, 4]
        assert ("get_for_principal", 0) not in journal.reads
        assert ("events", 0) not in journal.reads
        assert journal.reads  # the later events were read from the journal

    asyncio.run(scenario())


class _CountingDispatch(FakeDispatch):
    """FakeDispatch noting each Operation message built (``waiting_for`` is asked once
    per ``operation_to_proto``)."""

    built: int = 0

    def waiting_for(self, record: OperationRecord) -> str:
        self.built += 1
        return super().waiting_for(record)


def test_terminal_only_builds_no_message_for_the_events_it_skips() -> None:
    """§7, issue 10, terminal_only: events between the acceptance and the terminal one are
    read past, one wake-up each, without building an Operation for them: two built in all
    (the acceptance's and the terminal event's)."""

    async def scenario() -> None:
        journal = _ReadLog()
        dispatch = _CountingDispatch(journal)
        async with serving(journal, dispatch=dispatch) as h:
            stub = h.stub()
            call = _call(stub, submit_request(), terminal_only=True)
            op_id = (await _read(call)).operation.operation_id
            await advance(journal, op_id, OpState.DISPATCHING, attempt=True)
            h.feed.publish(op_id)
            await _until(lambda: ("events", 2) in journal.reads)  # read past sequence 2
            await advance(journal, op_id, OpState.RUNNING, execution=Execution.STARTED)
            h.feed.publish(op_id)
            await _until(lambda: ("events", 3) in journal.reads)
            await advance(journal, op_id, OpState.SUCCEEDED, execution=Execution.STARTED)
            h.feed.publish(op_id)
            assert _sequences(await _drain(call)) == [4]
        assert dispatch.built == 2

    asyncio.run(scenario())


def test_a_turn_runs_to_succeeded_through_a_real_runner(tmp_path: Path) -> None:
    """Issue 10 end to end: a real coordinator (SQLite journal, its dispatcher) and a real
    runner (echo executor). One call accepts the turn and streams it to SUCCEEDED; the
    same call again replays the same operation with the same events."""

    async def scenario() -> None:
        async with Stack(tmp_path, secret=runner_access.SECRET) as stack:
            await stack.start_runner("r1", executor="echo")
            token = stack.add_token("alice")
            coordinator = await stack.start_coordinator()
            async with grpc.aio.insecure_channel(coordinator.address) as channel:
                stub: Any = coordinator_pb2_grpc.TurnServiceStub(channel)
                request = _S.SubmitAndWatchRequest(submit=submit_request("e2e-1"))
                ran = await _drain(stub.SubmitAndWatch(request, metadata=bearer(token)))
                again = await _drain(stub.SubmitAndWatch(request, metadata=bearer(token)))
        assert _sequences(ran) == list(range(1, len(ran) + 1))
        assert ran[0].event.to_state == _S.OPERATION_STATE_QUEUED
        assert not any(m.replayed for m in ran)
        final = ran[-1].operation
        assert (final.state, final.execution) == (
            _S.OPERATION_STATE_SUCCEEDED,
            turn_pb2.EXECUTION_STARTED,
        )
        assert final.result.output == b"hello" and final.attempt_count == 1
        assert [m.event for m in again] == [m.event for m in ran]
        assert all(m.replayed for m in again)
        assert again[-1].operation.operation_id == final.operation_id

    asyncio.run(scenario())
