"""A replica reads its API through its write-through cache (issue 12, on
PostgreSQL with NOTIFY): a notification drops an older cached copy, and a
watch whose poll ran out with nothing heard reads the journal itself, so a
change whose notification was lost still reaches the watcher."""

from __future__ import annotations

import asyncio
import dataclasses

import grpc
import pytest

from coordinator_svc.core.model import OpState
from coordinator_svc.storage import FakeJournal
from coordinator_svc.storage.cached import CachedJournal
from tests.coordinator.api.harness import ALICE, advance, serving, submit_request
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.testing.records import new_operation, submitted

STEP_TIMEOUT = 5.0


def _watch_to_the_end(reread: bool) -> list[int]:
    """Another replica (the inner journal, no feed, no notification) cancels the
    turn; the states the watch on this replica streamed."""

    async def scenario() -> list[int]:
        inner = FakeJournal()
        cache = CachedJournal(inner)
        hook = (lambda op_id: cache.forget([op_id])) if reread else None
        async with serving(cache, reread_on_poll=hook) as h:
            stub = h.stub()
            reply = await stub.SubmitTurn(submit_request(), metadata=ALICE)
            op_id = reply.operation.operation_id
            call = stub.WatchOperation(
                coordinator_pb2.WatchOperationRequest(operation_id=op_id), metadata=ALICE
            )
            states = [(await asyncio.wait_for(call.read(), STEP_TIMEOUT)).event.to_state]
            await advance(inner, op_id, OpState.CANCELLED)  # behind the cache's back
            try:
                message = await asyncio.wait_for(call.read(), STEP_TIMEOUT)
            except TimeoutError:
                call.cancel()
                return states
            if message is not grpc.aio.EOF:
                states.append(message.event.to_state)
            return states

    return asyncio.run(scenario())


def test_a_watch_whose_poll_ran_out_reads_past_a_stale_cache() -> None:
    assert _watch_to_the_end(reread=True) == [
        coordinator_pb2.OPERATION_STATE_QUEUED,
        coordinator_pb2.OPERATION_STATE_CANCELLED,
    ]


def test_without_the_reread_a_lost_notification_leaves_the_watch_waiting() -> None:
    """The failure the reread prevents (so the test above can fail)."""
    assert _watch_to_the_end(reread=False) == [coordinator_pb2.OPERATION_STATE_QUEUED]


def test_saw_drops_only_an_older_cached_copy_and_clear_drops_all() -> None:
    async def scenario() -> None:
        inner = FakeJournal()
        cache = CachedJournal(inner)
        one = await submitted(cache, 1)
        two = await submitted(cache, 2)
        assert cache.cached == 2
        cache.saw(one.operation_id, one.version)  # our own commit coming back
        assert cache.cached == 2
        newer = dataclasses.replace(new_operation(1), version=one.version + 1)
        cache.saw(newer.operation_id, newer.version)  # another replica wrote it
        assert cache.cached == 1
        cache.clear()
        assert cache.cached == 0 and cache.cached_bytes == 0
        assert await cache.get(two.operation_id) == two  # read again from the journal

    asyncio.run(scenario())


def test_a_read_that_left_before_an_announced_commit_is_not_kept() -> None:
    """The race a replica's cache must survive: a read of version v is on its way
    back when another replica's commit of v+1 is announced; the old copy it
    brings is served once (it is what the read saw) but never kept."""

    async def scenario() -> None:
        inner = FakeJournal()
        cache = CachedJournal(inner)
        stored = await submitted(inner, 1)
        cache.saw(stored.operation_id, stored.version + 1)  # announced before the read lands
        assert await cache.get(stored.operation_id) == stored
        assert cache.cached == 0

    asyncio.run(scenario())


@pytest.mark.rule("O5")
def test_a_terminal_event_read_past_a_stale_cached_row_is_sent_with_that_end_state() -> None:
    """§5 O5. CI, stop 22: a watch on a replica that did not own the turn streamed the
    CANCELLED event with a CANCELLING snapshot, and the SDK's `wait` then said
    "still CANCELLING: the watch ended early". Events the cache does not hold in
    full are read from the journal, which may be past the cached row (another
    replica committed, its notification not yet heard): the snapshot sent with
    them must be at least as new as they are."""

    async def scenario() -> tuple[int, int]:
        inner = FakeJournal()
        cache = CachedJournal(inner)
        async with serving(cache) as h:
            stub = h.stub()
            reply = await stub.SubmitTurn(submit_request(), metadata=ALICE)
            op_id = reply.operation.operation_id
            # Another replica dispatched it; this one re-read the row (its events
            # are not known in full here, only the record).
            await advance(inner, op_id, OpState.DISPATCHING, attempt=True)
            cache.forget([op_id])
            assert (await cache.get(op_id)).state is OpState.DISPATCHING  # type: ignore[union-attr]
            # As the SDK's wait() does: watch from the last event the client read.
            call = stub.WatchOperation(
                coordinator_pb2.WatchOperationRequest(operation_id=op_id, after_sequence=2),
                metadata=ALICE,
            )
            # The other replica ends it; this replica's watch is woken before the
            # notification of that commit reached its cache.
            await advance(inner, op_id, OpState.CANCELLED, cancel_requested=True)
            h.feed.publish(op_id)
            message = await asyncio.wait_for(call.read(), STEP_TIMEOUT)
            call.cancel()
            return message.event.to_state, message.operation.state

    cancelled = coordinator_pb2.OPERATION_STATE_CANCELLED
    assert asyncio.run(scenario()) == (cancelled, cancelled)
