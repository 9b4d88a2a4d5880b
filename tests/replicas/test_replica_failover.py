"""Issue 12 on real processes: three coordinator replicas on one PostgreSQL
journal, two runners, turns in flight, and one replica lost in each of the
ways a replica is lost. Each test asserts §8 1-6 over everything the run
left (the oracle: no duplicate execution, nothing lost, every operation
terminal, legal event logs, proof before every replay) and reports how long
the takeover took.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.replicas.workload import Workload, assert_clean
from tests.support.tcp_partition import TcpPartition
from turnwire.testing.replicas import LEASE_TTL, OPEN, ReplicaCluster

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

TURNS = 40
SETTLE_SECONDS = 90.0


@pytest.fixture
def cluster(tmp_path: Path, postgres_url: str) -> Iterator[ReplicaCluster]:
    deployment = ReplicaCluster(tmp_path / "run", journal_url=postgres_url, runner_count=2)
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop()


def _report(what: str, seconds: float) -> None:
    print(f"\n{what}: {seconds:.2f} s (lease TTL {LEASE_TTL} s)")


@pytest.mark.rule("O3")
def test_kill_9_of_one_replica_mid_flight_loses_and_doubles_nothing(
    cluster: ReplicaCluster,
) -> None:
    """§5 O3, §8.1-2. A replica SIGKILLed with turns in flight: the others adopt its operations
    once its lease lapses (about one TTL) and finish every one exactly once."""
    load = Workload(cluster, seed=3)

    async def scenario() -> float:
        await load.submit(TURNS)
        held = cluster.open_leased_by("replica-1")
        assert held > 0, f"replica-1 holds nothing to lose: {cluster.owners()}"
        cluster.kill("replica-1")
        takeover = await asyncio.to_thread(
            cluster.wait_until_none_leased_by, "replica-1", 10 * LEASE_TTL
        )
        await load.settle(SETTLE_SECONDS)
        return takeover

    takeover = asyncio.run(scenario())
    _report("takeover after kill -9", takeover)
    verdict = load.verdict()
    print(f"figures: {verdict.figures}")
    assert_clean(verdict, TURNS)
    assert takeover >= 0.5 * LEASE_TTL  # adopted only after the lease lapsed, never a live one


def _owner_strings(cluster: ReplicaCluster, name: str, *, open_only: bool) -> dict[str, str]:
    """Operations whose lease names replica ``name`` (``open_only``: not
    terminal, or a Release owed): id -> the full owner string."""
    with cluster.connect() as connection:
        rows = connection.execute(
            "SELECT operation_id, lease_owner FROM operations"
            f" WHERE split_part(lease_owner, '#', 1) = %s{f' AND {OPEN}' if open_only else ''}",
            (name,),
        ).fetchall()
    return {str(op): str(owner) for op, owner in rows}


@pytest.mark.rule("O4")
def test_a_replica_paused_past_its_lease_wakes_up_unable_to_write(
    cluster: ReplicaCluster,
) -> None:
    """§5 O4, §8.7. SIGSTOP past the lease (a zombie), SIGCONT: the others adopted its
    operations meanwhile; the woken process takes none back, notices its lapse,
    and serves again; every turn ends once."""
    load = Workload(cluster, seed=5)

    async def scenario() -> tuple[float, dict[str, str], dict[str, str]]:
        first = asyncio.create_task(load.submit(TURNS, prefix="before"))
        await asyncio.sleep(1.0)
        held = _owner_strings(cluster, "replica-1", open_only=True)
        cluster.pause("replica-1")
        try:
            takeover = await asyncio.to_thread(
                cluster.wait_until_none_leased_by, "replica-1", 10 * LEASE_TTL
            )
            await asyncio.sleep(LEASE_TTL)
            # Taken while it cannot move: a turn it finished between the snapshot
            # above and SIGSTOP still names it, terminal, and was never lost.
            at_wake = _owner_strings(cluster, "replica-1", open_only=False)
        finally:
            cluster.resume("replica-1")
        await first
        await load.submit(TURNS // 2, prefix="after")  # the woken replica takes turns again
        await load.settle(SETTLE_SECONDS)
        return takeover, held, at_wake

    takeover, held, at_wake = asyncio.run(scenario())
    _report("takeover while paused", takeover)
    lost = {op: owner for op, owner in held.items() if at_wake.get(op) != owner}
    assert lost, "the others adopted none of replica-1's operations while it was paused"
    now = _owner_strings(cluster, "replica-1", open_only=False)
    retaken = {op for op, owner in lost.items() if now.get(op) == owner}
    assert not retaken, f"the woken replica wrote {len(retaken)} operation(s) it had lost"
    log = cluster.replicas["replica-1"].log_path.read_text()
    assert "leases lapsed" in log
    verdict = load.verdict()
    print(f"figures: {verdict.figures}")
    assert_clean(verdict, TURNS + TURNS // 2)


@pytest.fixture
def partitioned_cluster(
    tmp_path: Path, postgres_url: str
) -> Iterator[tuple[ReplicaCluster, TcpPartition]]:
    url = make_url(postgres_url)
    assert url.port is not None
    partition = TcpPartition(url.port)
    via = url.set(host="127.0.0.1", port=partition.port).render_as_string(hide_password=False)
    deployment = ReplicaCluster(
        tmp_path / "run", journal_url=postgres_url, runner_count=2, via={"replica-1": via}
    )
    try:
        deployment.start()
        yield deployment, partition
    finally:
        deployment.stop()
        partition.stop()


@pytest.mark.rule("O4", "O3")
def test_a_replica_cut_off_from_postgresql_loses_its_operations_and_nothing_else(
    partitioned_cluster: tuple[ReplicaCluster, TcpPartition],
) -> None:
    """§5 O4/O3. A partition between one replica and PostgreSQL (its TCP path to the
    journal stops carrying bytes): it stops acting once its leases lapse, the
    others adopt its operations, and after the heal it serves again.

    One exception, the server's and not Turnwire's to decide: writes sent
    together in one pipeline are one implicit transaction, and a cut between
    two of its statements leaves the server waiting for the rest with that
    transaction's row locks held (no idle timeout applies mid-pipeline; on a
    real cut the server's TCP keepalive, which the journal's sessions set, ends
    it seconds later, §5 O4; this forwarder's kernel answers the probes, so here
    it lasts until the heal). The others' SKIP LOCKED claims pass over
    those rows (never a write under a lock), so they may stay leased until the
    heal. Every other operation must be adopted; the held ones are checked to
    be row-locked, and the heal then lets the run finish them (assert_clean)."""
    cluster, partition = partitioned_cluster
    load = Workload(cluster, seed=7)

    async def scenario() -> tuple[float, list[str]]:
        first = asyncio.create_task(load.submit(TURNS, prefix="before"))
        await asyncio.sleep(1.0)
        assert cluster.open_leased_by("replica-1") > 0
        partition.partition()
        held: list[str] = []
        try:
            try:
                takeover = await asyncio.to_thread(
                    cluster.wait_until_none_leased_by, "replica-1", 10 * LEASE_TTL
                )
            except AssertionError:
                held, free = await asyncio.to_thread(cluster.row_locked_open_leased_by, "replica-1")
                assert not free, (
                    f"not adopted after {10 * LEASE_TTL} s, and no row lock keeps them: {free}"
                )
                takeover = 10 * LEASE_TTL
        finally:
            partition.heal()
        await first
        await load.submit(TURNS // 2, prefix="after")
        await load.settle(SETTLE_SECONDS)
        return takeover, held

    takeover, held = asyncio.run(scenario())
    _report("takeover during a partition from PostgreSQL", takeover)
    print(f"held by the cut pipeline's row locks until the heal: {held}")
    verdict = load.verdict()
    print(f"figures: {verdict.figures}")
    assert_clean(verdict, TURNS + TURNS // 2)
    assert cluster.replicas["replica-1"].alive()


@pytest.mark.rule("O3")
def test_a_rolling_restart_of_every_replica_under_load(cluster: ReplicaCluster) -> None:
    """§5 O3 (hand-off, same id). SIGTERM and restart each replica in turn
    (same id, same port) while turns keep arriving: a clean stop hands its
    leases off, so the others adopt at once; nothing is lost or run twice."""
    load = Workload(cluster, seed=9)

    async def scenario() -> list[float]:
        loading = asyncio.create_task(load.submit(2 * TURNS, concurrency=8))
        handoffs = []
        for name in cluster.names:
            await asyncio.sleep(1.0)
            began = time.monotonic()
            await asyncio.to_thread(cluster.replicas[name].terminate)
            await asyncio.to_thread(cluster.wait_until_none_leased_by, name, 10 * LEASE_TTL)
            handoffs.append(time.monotonic() - began)
            await asyncio.to_thread(cluster.start_replica, name)
        await loading
        await load.settle(SETTLE_SECONDS)
        return handoffs

    handoffs = asyncio.run(scenario())
    for name, seconds in zip(cluster.names, handoffs, strict=True):
        _report(f"{name}: from SIGTERM to all its operations adopted", seconds)
    verdict = load.verdict()
    print(f"figures: {verdict.figures}, resubmits {load.resubmits}")
    assert_clean(verdict, 2 * TURNS)


@pytest.mark.rule("O3", "C12", "C8")
@pytest.mark.parametrize(
    "crash_at",
    ["coordinator.after_attempt_commit@4", "coordinator.after_dispatch_send@4"],
)
def test_a_replica_dying_between_attempt_and_reply_is_reconciled_by_another(
    tmp_path: Path, postgres_url: str, crash_at: str
) -> None:
    """§5 O3 + C12/C8, §8.4. The hard case of §5: a replica dies with a Dispatch written ahead (or
    sent) and no reply recorded. The adopter must treat it as C12 does
    (DISPATCH_UNKNOWN), then prove what happened at the runner before any
    resend: the run exercises a reconcile or a proven replay, never a blind one."""
    cluster = ReplicaCluster(
        tmp_path / "run",
        journal_url=postgres_url,
        runner_count=2,
        replica_env={"replica-1": {"TURNWIRE_CRASH_AT": crash_at}},
    )
    load = Workload(cluster, seed=11, sleep_ms=(50, 300))
    try:
        cluster.start()

        async def scenario() -> float:
            await load.submit(TURNS)
            died = await asyncio.to_thread(_wait_exit, cluster, "replica-1", 30.0)
            assert died, "the crash point never fired"
            takeover = await asyncio.to_thread(
                cluster.wait_until_none_leased_by, "replica-1", 10 * LEASE_TTL
            )
            await load.settle(SETTLE_SECONDS)
            return takeover

        takeover = asyncio.run(scenario())
    finally:
        cluster.stop()
    _report(f"takeover after a crash at {crash_at}", takeover)
    verdict = load.verdict()
    print(f"figures: {verdict.figures}")
    assert_clean(verdict, TURNS)
    figures = verdict.figures
    assert figures.reconciled_without_resend + figures.replays >= 1, "nothing was in doubt"


def _wait_exit(cluster: ReplicaCluster, name: str, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not cluster.replicas[name].alive():
            return True
        time.sleep(0.1)
    return False
