"""Shared fixtures (the throwaway PostgreSQL cluster, tests/support/postgres.py) and
the ``serial`` marking that decides which tests scripts/test runs alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.postgres import PostgresCluster, running_cluster
from turnwire.observability.logs import remove_logging

# Packages whose tests run alone, never beside a pytest-xdist worker: the bench
# smoke tests measure CPU and throughput and run whole deployments against
# their own time budgets, and chaos runs seeded fault cycles for a fixed time.
# A second worker beside them would measure the machine, not Turnwire.
SERIAL_PACKAGES = ("tests/bench/", "tests/chaos/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of SERIAL_PACKAGES ``serial`` (scripts/test: ``-m serial``)."""
    for item in items:
        path = item.path.as_posix()
        if any(f"/{package}" in path for package in SERIAL_PACKAGES):
            item.add_marker(pytest.mark.serial)


@pytest.fixture(autouse=True)
def _no_service_logging_left_behind() -> Iterator[None]:
    """A test that ran a service's main() in process leaves no log handler of the
    service behind: later tests' log lines would go to the worker's own stderr,
    into the middle of pytest's report."""
    yield
    remove_logging()


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """One PostgreSQL cluster for the session; skipped (with the reason) without binaries.

    With CI=true a cluster that fails to start fails the tests instead of skipping.
    """
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture
def postgres_url(postgres_cluster: PostgresCluster) -> Iterator[str]:
    """A fresh, empty database for this test (postgresql+psycopg URL); dropped after."""
    name = postgres_cluster.create_database()
    try:
        yield postgres_cluster.url(name)
    finally:
        postgres_cluster.drop_database(name)
