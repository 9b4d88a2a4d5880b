"""PROTOCOL.md §12 S8: a watch on a replica that does not own the turn still gets the
turn's streamed output: that replica opens its own StreamOutput to the bound
runner (runners serve any number of readers, R13). Two replica processes on one
PostgreSQL journal, one runner process serving tests.streaming.emitters:count."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.streaming.emitters import chunk_text
from turnwire.client import Operation, OperationState, OutputChunk, OutputGap, StreamItem
from turnwire.client.aio import AsyncTurnwireClient
from turnwire.testing.replicas import ReplicaCluster

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

REPO = Path(__file__).resolve().parents[2]
WAIT = 30.0
CHUNKS = 12


@pytest.fixture
def pair(tmp_path: Path, postgres_url: str) -> Iterator[ReplicaCluster]:
    deployment = ReplicaCluster(
        tmp_path / "run",
        journal_url=postgres_url,
        runner_count=1,
        replica_count=2,
        executor="python:tests.streaming.emitters:count",
        runner_env={"PYTHONPATH": str(REPO)},
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


@pytest.mark.rule("S8")
def test_a_watch_on_the_replica_that_does_not_own_the_turn_gets_every_chunk(
    pair: ReplicaCluster,
) -> None:
    """S8: submitted through replica-1 (the owner), streamed through replica-2 and
    replica-1 at once; both get chunks 1..12 in order, no gap, then SUCCEEDED."""

    async def scenario() -> tuple[list[StreamItem], list[StreamItem]]:
        async with _client(pair, "replica-1") as owner, _client(pair, "replica-2") as other:
            submitted = await owner.submit(
                items=["go"],
                model="test/count",
                parameters={"chunks": str(CHUNKS), "pause_ms": "40", "start_ms": "500"},
            )
            op_id = submitted.operation.operation_id

            async def collect(client: AsyncTurnwireClient) -> list[StreamItem]:
                return [item async for item in client.stream(op_id, timeout=WAIT)]

            on_owner, elsewhere = await asyncio.gather(collect(owner), collect(other))
            return on_owner, elsewhere

    on_owner, elsewhere = asyncio.run(scenario())
    text = "".join(chunk_text(n) for n in range(1, CHUNKS + 1))
    for items in (on_owner, elsewhere):
        *output, final = items
        assert isinstance(final, Operation) and final.state is OperationState.SUCCEEDED
        assert not [i for i in output if isinstance(i, OutputGap)]
        chunks = [i for i in output if isinstance(i, OutputChunk)]
        assert [c.offset for c in chunks] == list(range(1, CHUNKS + 1))
        assert "".join(c.text for c in chunks) == text
