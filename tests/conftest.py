"""Shared fixtures: only the throwaway PostgreSQL cluster (tests/support/postgres.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.postgres import ClusterStartError, PostgresCluster, missing_binary


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """One PostgreSQL cluster for the session; skipped (with the reason) without binaries.

    With CI=true a cluster that fails to start fails the tests instead of skipping.
    """
    missing = missing_binary()
    if missing is not None:
        pytest.skip(f"cannot start a PostgreSQL test cluster, missing: {missing}")
    cluster = PostgresCluster()
    try:
        try:
            cluster.start()
        except (ClusterStartError, OSError) as error:
            if os.environ.get("CI") == "true":
                pytest.fail(f"PostgreSQL cluster failed to start under CI: {error}")
            pytest.skip(f"PostgreSQL cluster failed to start: {error}")
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster: PostgresCluster) -> Iterator[str]:
    """A fresh, empty database for this test (postgresql+psycopg URL); dropped after."""
    name = postgres_cluster.create_database()
    try:
        yield postgres_cluster.url(name)
    finally:
        postgres_cluster.drop_database(name)
