"""§5 O6 on real processes: a second live process under a replica id that is
already running refuses to start, and takes nothing from the first."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.replicas.cluster import OPEN, ReplicaCluster
from tests.replicas.workload import Workload
from turnwire.launcher import LaunchError

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _leases(cluster: ReplicaCluster) -> dict[str, tuple[str, bool]]:
    """Open operations: id -> (full owner string, whether its lease is live now)."""
    with cluster.connect() as connection:
        rows = connection.execute(
            "SELECT operation_id, lease_owner, lease_expires_at > now() FROM operations"
            f" WHERE {OPEN}"
        ).fetchall()
    return {str(op): (str(owner), bool(live)) for op, owner, live in rows}


def test_a_second_live_process_under_one_replica_id_refuses_to_start(
    tmp_path: Path, postgres_url: str
) -> None:
    """Two processes given one --replica-id used to take each other's operations at
    every start. Now the second sees the first renew its leases, exits 1 with an
    error naming the live owner and the fix, and the first keeps every lease."""
    cluster = ReplicaCluster(
        tmp_path / "run", journal_url=postgres_url, runner_count=1, replica_count=1
    )
    twin = None
    try:
        cluster.start()
        # A turn far longer than the test (ended by SIGKILL below, not drained):
        # open all along, under replica-1's renewed lease.
        asyncio.run(Workload(cluster, seed=5, sleep_ms=(600_000, 600_000)).submit(1))
        before = _leases(cluster)
        assert [live for _, live in before.values()] == [True], before
        twin = cluster._coordinator_process(
            "127.0.0.1:0",
            name="replica-1-twin",
            extra_args=("--replica-id", "replica-1", "--lease-ttl", str(cluster.lease_ttl)),
        )
        with pytest.raises(LaunchError, match="exited with 1"):
            twin.start(60.0)
        said = twin.log_tail()
        assert "replica id 'replica-1' is in use" in said, said
        assert "--replica-id" in said and "not starting" in said, said
        owner = next(iter(before.values()))[0]
        assert owner in said, said
        assert _leases(cluster) == before  # same owner, still live: nothing taken
        assert cluster.replicas["replica-1"].alive()
    finally:
        if twin is not None:
            twin.kill()
        for process in cluster.processes():  # by PID; a drain would wait out the turn
            process.kill()
        cluster.stop()
