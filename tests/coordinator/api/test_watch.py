"""WatchOperation: every transition from a cursor; resume without a gap (§7, C13)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from coordinator_svc.core.model import Execution, OpState
from coordinator_svc.ports import Journal
from tests.coordinator.api.conftest import Store
from tests.coordinator.api.harness import (
    ALICE,
    advance,
    rpc_error,
    run_to_success,
    serving,
    submit_request,
)
from turnwire.coordinator.v1 import coordinator_pb2

_S = coordinator_pb2
STEP_TIMEOUT = 10.0


def _watch(stub: Any, op_id: str, after: int = 0) -> Any:
    return stub.WatchOperation(
        coordinator_pb2.WatchOperationRequest(operation_id=op_id, after_sequence=after),
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


@pytest.mark.rule("C13")
def test_watch_streams_every_transition_and_ends_after_the_terminal_event(store: Store) -> None:
    """§7/C13: from cursor 0 the stream holds every event in order, then ends."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            op_id = (await stub.SubmitTurn(submit_request(), metadata=ALICE)).operation.operation_id
            call = _watch(stub, op_id)
            first = await _read(call)
            assert first.event.sequence == 1
            assert first.event.from_state == _S.OPERATION_STATE_UNSPECIFIED
            assert first.event.to_state == _S.OPERATION_STATE_QUEUED
            assert first.operation.operation_id == op_id
            await run_to_success(journal, op_id)
            h.feed.publish(op_id)
            rest = await _drain(call)
            assert [m.event.sequence for m in rest] == [2, 3, 4]
            assert [m.event.to_state for m in rest] == [
                _S.OPERATION_STATE_DISPATCHING,
                _S.OPERATION_STATE_RUNNING,
                _S.OPERATION_STATE_SUCCEEDED,
            ]
            assert rest[-1].operation.state == _S.OPERATION_STATE_SUCCEEDED
            assert rest[-1].operation.result.output == b"done"
            for message in rest:
                assert message.operation.last_event_sequence >= message.event.sequence

    store.run(scenario)


def test_reconnecting_with_the_last_cursor_misses_nothing(store: Store) -> None:
    """§7: a client that disconnects and resumes from its last sequence sees every event."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            op_id = (await stub.SubmitTurn(submit_request(), metadata=ALICE)).operation.operation_id
            await advance(journal, op_id, OpState.DISPATCHING, attempt=True)
            call = _watch(stub, op_id)
            got = [await _read(call), await _read(call)]
            call.cancel()  # the client goes away mid-stream
            last = got[-1].event.sequence
            # Changes happen while nobody watches, without any feed notification.
            await advance(journal, op_id, OpState.RUNNING, execution=Execution.STARTED)
            await advance(journal, op_id, OpState.CANCELLING)
            await advance(journal, op_id, OpState.CANCELLED, error_reason="CANCELLED")
            resumed = await _drain(_watch(h.stub(), op_id, after=last))
            sequences = [m.event.sequence for m in got + resumed]
            assert sequences == [1, 2, 3, 4, 5]
            assert resumed[-1].event.to_state == _S.OPERATION_STATE_CANCELLED
            assert resumed[-1].operation.error.reason == "CANCELLED"

    store.run(scenario)


def test_watch_from_a_cursor_skips_earlier_events(store: Store) -> None:
    """§7: after_sequence=N streams only events with sequence > N."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            op_id = (await stub.SubmitTurn(submit_request(), metadata=ALICE)).operation.operation_id
            await run_to_success(journal, op_id)
            messages = await _drain(_watch(stub, op_id, after=2))
            assert [m.event.sequence for m in messages] == [3, 4]

    store.run(scenario)


def test_watch_resumed_after_the_terminal_event_ends_at_once(store: Store) -> None:
    """§7: a cursor at the terminal event yields an empty, ended stream."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            op_id = (await stub.SubmitTurn(submit_request(), metadata=ALICE)).operation.operation_id
            await run_to_success(journal, op_id)
            assert await _drain(_watch(stub, op_id, after=4)) == []

    store.run(scenario)


def test_watch_sees_a_change_committed_by_another_replica(sqlite_store: Store) -> None:
    """§5/§7: a commit on another journal handle (no local feed) still reaches the watcher."""

    async def scenario(journal: Journal) -> None:
        other_replica = sqlite_store.open()
        async with serving(journal) as h:
            stub = h.stub()
            op_id = (await stub.SubmitTurn(submit_request(), metadata=ALICE)).operation.operation_id
            call = _watch(stub, op_id)
            assert (await _read(call)).event.sequence == 1
            await advance(other_replica, op_id, OpState.CANCELLED)
            rest = await _drain(call)
            assert [m.event.to_state for m in rest] == [_S.OPERATION_STATE_CANCELLED]

    sqlite_store.run(scenario)


def test_watch_ends_with_unavailable_when_the_server_shuts_down(store: Store) -> None:
    """Shutdown: an open watch ends with UNAVAILABLE so the client resumes elsewhere."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            op_id = (await stub.SubmitTurn(submit_request(), metadata=ALICE)).operation.operation_id
            call = _watch(stub, op_id)
            assert (await _read(call)).event.sequence == 1
            h.servicer.close()
            error = await rpc_error(asyncio.wait_for(call.read(), STEP_TIMEOUT))
            assert error.code() == grpc.StatusCode.UNAVAILABLE

    store.run(scenario)
