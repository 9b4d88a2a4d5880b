"""One real deployment per journal backend, shared by every scenario in this package.

Starting a coordinator, two runners and two fault proxies costs seconds, so
the scenarios share one deployment per backend; each scenario uses its own
operation, clears the proxy rules and leaves every process running
(``Stage.heal`` restarts anything a failed scenario left down or armed).

PostgreSQL: the session's throwaway cluster (``postgres_cluster``, the same
one behind ``postgres_url``), with a fresh database for this deployment,
dropped after it; without PostgreSQL binaries those scenarios are skipped
with the reason (under CI=true a cluster that fails to start fails them).

Which cells run on PostgreSQL: every cell runs on SQLite (the default
journal). On PostgreSQL, by default, the cells whose fault is the
coordinator's or a restored runner store's (recovery and reconcile read and
write the journal in their own ways there); the transport and runner faults
drive the same journal calls as on SQLite, which the journal conformance
suite, the replica tests and chaos already run on PostgreSQL. That halves the
matrix's share of CI (its 20 minutes on 2 cores). ``TURNWIRE_FULL_MATRIX=1``
runs every cell on both; the cells left out are reported as deselected.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.scenarios.cells import Cell, Fault
from tests.scenarios.stage import Stage, make_deployment
from turnwire.testing.postgres import PostgresCluster

BACKENDS = ("sqlite", "postgresql")
# The faults whose cells run on PostgreSQL too by default (see above).
ON_POSTGRESQL = frozenset({Fault.COORDINATOR_SIGKILL, Fault.RUNNER_RESTORED})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (never skip) the PostgreSQL runs of the other cells, unless
    TURNWIRE_FULL_MATRIX=1."""
    if os.environ.get("TURNWIRE_FULL_MATRIX", "") in ("1", "true", "yes"):
        return
    kept, left_out = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        cell = callspec.params.get("cell") if callspec is not None else None
        backend = callspec.params.get("stage") if callspec is not None else None
        if isinstance(cell, Cell) and backend == "postgresql" and cell.fault not in ON_POSTGRESQL:
            left_out.append(item)
        else:
            kept.append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


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
