"""Issue 12: the public API works on every replica. A turn accepted by one
replica is read, watched and cancelled through another: the change the owner
commits reaches the other replica's watchers, and a cancel stored by a
replica that does not hold the lease is carried out by the one that does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnwire.client.aio import AsyncTurnwireClient
from turnwire.client.values import Operation, OperationState
from turnwire.testing.replicas import ReplicaCluster

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

WAIT = 30.0


@pytest.fixture
def pair(tmp_path: Path, postgres_url: str) -> Iterator[ReplicaCluster]:
    # One runner with one writable slot: a second writable turn waits QUEUED.
    deployment = ReplicaCluster(
        tmp_path / "run",
        journal_url=postgres_url,
        runner_count=1,
        replica_count=2,
        writable_slots=1,
    )
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop()


def _client(cluster: ReplicaCluster, name: str) -> AsyncTurnwireClient:
    return AsyncTurnwireClient(
        cluster.address_of(name), cluster.token, credentials=cluster.client_credentials()
    )


async def _until(client: AsyncTurnwireClient, op_id: str, *states: OperationState) -> Operation:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        latest = await client.get(op_id)
        if latest.state in states:
            return latest
        await asyncio.sleep(0.1)
    raise AssertionError(f"{op_id} never reached {states}; last {latest.state}")


@pytest.mark.rule("O5", "C11")
def test_cancel_and_watch_through_the_replica_that_does_not_own_the_turn(
    pair: ReplicaCluster,
) -> None:
    """§5 O5, C11. Accepted by replica-1; replica-2 cancels a QUEUED turn (it ends there,
    nothing was sent) and a RUNNING one (replica-1 sends the Cancel); a watch
    on replica-2 sees the terminal state replica-1 committed."""

    async def scenario() -> tuple[Operation, Operation]:
        async with _client(pair, "replica-1") as owner, _client(pair, "replica-2") as other:
            running = await owner.submit(
                items=["long"], model="builtin/metered", parameters={"sleep_ms": "60000"}
            )
            waiting = await owner.submit(
                items=["waits"], model="builtin/metered", parameters={"sleep_ms": "10"}
            )
            running_id = running.operation.operation_id
            waiting_id = waiting.operation.operation_id
            await _until(other, running_id, OperationState.RUNNING)
            assert (await other.get(waiting_id)).state is OperationState.QUEUED
            queued_cancel = await other.cancel(waiting_id)
            watched = asyncio.create_task(other.wait(running_id, timeout=WAIT))
            marked = await other.cancel(running_id)
            assert marked.cancel_requested
            return queued_cancel, await watched

    queued_cancel, ended = asyncio.run(scenario())
    assert queued_cancel.state is OperationState.CANCELLED
    assert ended.state is OperationState.CANCELLED
    assert ended.cancel_requested
    log = pair.replicas["replica-1"].log_path.read_text()
    assert "CANCELLING" in log  # the owner moved it on and sent the Cancel
    assert "CANCELLING" not in pair.replicas["replica-2"].log_path.read_text()


def test_a_watch_on_another_replica_hears_the_owner_commit_without_polling(
    tmp_path: Path, postgres_url: str
) -> None:
    """Migration 0005's NOTIFY: with the watch poll set to a minute, a watch on
    replica-2 still sees replica-1's commits as they happen (every event, up to
    the terminal one, well inside the minute)."""
    cluster = ReplicaCluster(
        tmp_path / "run",
        journal_url=postgres_url,
        runner_count=1,
        replica_count=2,
        coordinator_args=("--watch-poll", "60"),
    )

    async def scenario() -> tuple[Operation, float]:
        async with _client(cluster, "replica-1") as owner, _client(cluster, "replica-2") as other:
            submitted = await owner.submit(
                items=["short"], model="builtin/metered", parameters={"sleep_ms": "500"}
            )
            started = time.monotonic()
            ended = await other.wait(submitted.operation.operation_id, timeout=WAIT)
            return ended, time.monotonic() - started

    try:
        cluster.start()
        ended, seconds = asyncio.run(scenario())
    finally:
        cluster.stop()
    assert ended.state is OperationState.SUCCEEDED
    assert seconds < WAIT  # not woken by the 60 s poll
