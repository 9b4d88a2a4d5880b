"""Shared fixtures (the throwaway PostgreSQL cluster, turnwire/testing/postgres.py) and
the ``serial`` marking that decides which tests scripts/test runs alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from turnwire.observability.logs import remove_logging
from turnwire.testing.postgres import PostgresCluster, running_cluster

# Packages whose tests run alone, never beside a pytest-xdist worker: the bench
# smoke tests measure CPU and throughput and run whole deployments against
# their own time budgets, and chaos runs seeded fault cycles for a fixed time.
# A second worker beside them would measure the machine, not Turnwire.
SERIAL_PACKAGES = ("tests/bench/", "tests/chaos/")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--rule",
        action="append",
        default=[],
        metavar="ID",
        help="run only the tests marked @pytest.mark.rule(ID) (repeatable; docs/RULES.md)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of SERIAL_PACKAGES ``serial`` (scripts/test: ``-m serial``);
    with ``--rule ID``, keep only the tests that pin one of those rules."""
    for item in items:
        path = item.path.as_posix()
        if any(f"/{package}" in path for package in SERIAL_PACKAGES):
            item.add_marker(pytest.mark.serial)
    wanted = set(config.getoption("--rule"))
    if not wanted:
        return
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        ids = {rule_id for mark in item.iter_markers("rule") for rule_id in mark.args}
        (kept if ids & wanted else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


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
