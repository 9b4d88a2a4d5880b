"""The runner set changed on live replicas (PROTOCOL.md §11 M2-M5): real coordinator
processes on one PostgreSQL journal, real runners, turns in flight all along.

Two replicas start with --runner flags for runner-1 and runner-2 only. While
a batch of turns runs, runner-3 is added through replica-1: both replicas
must route turns to it (replica-2 learns it from the journal). Then
runner-1 is drained through replica-2, removed (without force) once no turn
is bound to it and the drain had time to reach every replica, and a second
batch runs without it. The invariant oracle then reads the journal, every
runner store and the ledger: 0 duplicates, 0 lost, all terminal.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator_svc.api.runner_set import RUNNER_SET_POLL_SECONDS
from tests.replicas.workload import Workload, assert_clean
from turnwire.client import AsyncAdminClient
from turnwire.testing.replicas import ReplicaCluster

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(240)]

FIRST_BATCH = 60
SECOND_BATCH = 20
WAIT = 60.0


@pytest.fixture
def cluster(tmp_path: Path, postgres_url: str) -> Iterator[ReplicaCluster]:
    deployment = ReplicaCluster(
        tmp_path / "run",
        journal_url=postgres_url,
        runner_count=3,
        flagged_runners=2,
        replica_count=2,
        writable_slots=3,
    )
    try:
        yield deployment
    finally:
        deployment.stop()


def _attempts_by(cluster: ReplicaCluster, runner: str) -> dict[str, int]:
    """Attempts written to ``runner``, per replica that drives the operation."""
    with cluster.connect() as connection:
        rows = connection.execute(
            "SELECT split_part(o.lease_owner, '#', 1), count(*) FROM attempts a"
            " JOIN operations o USING (operation_id) WHERE a.runner = %s GROUP BY 1",
            (runner,),
        ).fetchall()
    return {str(owner): int(str(count)) for owner, count in rows}


def _attempts_since(cluster: ReplicaCluster, runner: str, moment: float) -> int:
    with cluster.connect() as connection:
        row = connection.execute(
            "SELECT count(*) FROM attempts WHERE runner = %s AND sent_at > to_timestamp(%s)",
            (runner, moment),
        ).fetchone()
    assert row is not None
    return int(str(row[0]))


async def _until(check: object, what: str, within: float = WAIT) -> float:
    """Seconds until ``check()`` (sync or async) is true, polled; bounded."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        result = check()  # type: ignore[operator]
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: not after {within}s")


@pytest.mark.rule("M2", "M5", "M3")
def test_a_runner_added_and_one_removed_on_live_replicas_lose_and_double_nothing(
    cluster: ReplicaCluster,
) -> None:
    """§11 M2/M5: runner-3, added on replica-1, takes turns from both replicas;
    M3: runner-1, drained on replica-2, is removed once idle and gets nothing
    after; the oracle finds 0 duplicates, 0 lost, every turn terminal."""
    cluster.start_runners()
    admin_token = cluster.issue_token("ops", scopes=("admin",))
    for name in cluster.names:
        cluster.start_replica(name)
    runner_3 = cluster.runners[2].dispatch_address
    workload = Workload(cluster, seed=24, sleep_ms=(300, 900))
    figures: dict[str, object] = {}

    async def admin(replica: str) -> AsyncAdminClient:
        return AsyncAdminClient(
            cluster.address_of(replica), admin_token, credentials=cluster.client_credentials()
        )

    async def scenario() -> None:
        batch = asyncio.create_task(workload.submit(FIRST_BATCH, prefix="first"))
        await asyncio.sleep(1.0)
        async with await admin("replica-1") as on_1, await admin("replica-2") as on_2:
            added = await on_1.add_runner("runner-3", runner_3, reason="more capacity")
            assert not added.replayed and added.runner.generation == 1
            figures["runner-3 used by every replica after (s)"] = round(
                await _until(
                    lambda: set(_attempts_by(cluster, "runner-3")) >= set(cluster.names),
                    "turns from every replica on runner-3",
                ),
                1,
            )
            await on_2.drain("runner-1", reason="retire")
            drained_at = time.monotonic()

            async def idle() -> bool:
                listed = {r.name: r for r in await on_2.runners()}
                return listed["runner-1"].bound_turns == 0

            await _until(idle, "runner-1 idle after its drain")
            # Every replica has read the drain (M3's limit), then the removal.
            await asyncio.sleep(
                max(0.0, 2 * RUNNER_SET_POLL_SECONDS - (time.monotonic() - drained_at))
            )
            removed = await on_2.remove_runner("runner-1", reason="retired")
            assert not removed.replayed and not removed.removal.forced
            removed_at = time.time()
            await batch
            for name in cluster.names:  # both replicas now serve runner-2 and runner-3
                async with await admin(name) as client:
                    await _until(
                        lambda c=client: _names(c, {"runner-2", "runner-3"}),
                        f"{name}'s runner set",
                    )
            await workload.submit(SECOND_BATCH, prefix="second")
            figures["settled in (s)"] = round(await workload.settle(WAIT), 1)
            figures["attempts to runner-1 after its removal"] = _attempts_since(
                cluster, "runner-1", removed_at
            )

    asyncio.run(scenario())
    verdict = workload.verdict()
    figures.update(
        {
            f"attempts on {slot.name}": sum(_attempts_by(cluster, slot.name).values())
            for slot in cluster.runners
        }
    )
    figures["runner-3 attempts by replica"] = _attempts_by(cluster, "runner-3")
    figures["oracle"] = (
        f"{verdict.figures.operations} operations, {verdict.figures.duplicates} duplicates, "
        f"{verdict.figures.lost} lost, {verdict.figures.non_terminal} not terminal"
    )
    print("\nmembership on live replicas: " + "; ".join(f"{k}: {v}" for k, v in figures.items()))
    assert figures["attempts to runner-1 after its removal"] == 0
    assert_clean(verdict, FIRST_BATCH + SECOND_BATCH)


async def _names(client: AsyncAdminClient, expected: set[str]) -> bool:
    return {runner.name for runner in await client.runners()} == expected
