"""One real deployment per journal backend, shared by every scenario in this package.

Starting a coordinator, two runners and two fault proxies costs seconds, so
the scenarios share one deployment per backend; each scenario uses its own
operation, clears the proxy rules and leaves every process running
(``Stage.heal`` restarts anything a failed scenario left down or armed).

PostgreSQL: the session's throwaway cluster (``postgres_cluster``, the same
one behind ``postgres_url``), with a fresh database for this deployment,
dropped after it; without PostgreSQL binaries those scenarios are skipped
with the reason (under CI=true a cluster that fails to start fails them).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.scenarios.stage import Stage, make_deployment
from tests.support.postgres import PostgresCluster

BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(scope="package", params=BACKENDS)
def stage(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stage]:
    backend: str = request.param
    cluster: PostgresCluster | None = None
    database = ""
    journal_url = None
    if backend == "postgresql":
        cluster = request.getfixturevalue("postgres_cluster")
        database = cluster.create_database()
        journal_url = cluster.url(database)
    deployment = make_deployment(tmp_path_factory.mktemp(f"scenarios-{backend}"), journal_url)
    try:
        deployment.start()
        yield Stage(deployment, backend)
    finally:
        deployment.stop()  # every process, by PID
        if cluster is not None:
            cluster.drop_database(database)
