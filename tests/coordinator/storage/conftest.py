"""The journal backends every contract test runs against: fake, SQLite, PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

from coordinator_svc.ports import Journal
from coordinator_svc.storage import FakeJournal

T = TypeVar("T")


@dataclass
class Backend:
    """One journal store; ``open()`` gives another handle on the same store
    (a second replica on SQL backends; the same object for the fake)."""

    name: str
    url: str | None
    _opened: list[Any] = field(default_factory=list)
    _fake: FakeJournal | None = None
    # The coordinator's own stack: SQLite behind the write-through cache. Like
    # the fake, every open() in a run is the same handle (one writer).
    cached: bool = False

    def open(self) -> Journal:
        if self._fake is not None:
            return self._fake
        from coordinator_svc.storage import open_journal
        from coordinator_svc.storage.cached import CachedJournal

        assert self.url is not None
        if self.cached:
            if not self._opened:
                self._opened.append(CachedJournal(open_journal(self.url)))
            journal: Journal = self._opened[0]
            return journal
        journal = open_journal(self.url)
        self._opened.append(journal)
        return journal

    def run(self, scenario: Callable[[Journal], Awaitable[T]]) -> T:
        """Run ``scenario(journal)`` on a fresh event loop; close every handle after."""

        async def main() -> T:
            try:
                return await scenario(self.open())
            finally:
                # The fake stays open so a later run sees the same store, as SQL does.
                for journal in self._opened:
                    await journal.close()
                self._opened.clear()

        return asyncio.run(main())


def migrated(url: str) -> str:
    from coordinator_svc.storage import migrate

    migrate(url)
    return url


@pytest.fixture(scope="module")
def module_postgres_journal(postgres_cluster: Any) -> Iterator[str]:
    """A migrated PostgreSQL database for one test module (CREATE DATABASE costs ~0.5 s)."""
    name = postgres_cluster.create_database()
    try:
        yield migrated(postgres_cluster.url(name))
    finally:
        postgres_cluster.drop_database(name)


def emptied(url: str) -> str:
    """The journal at ``url`` with every row removed, so each test starts from nothing."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql(
                "TRUNCATE events, attempts, operation_envelopes, operations,"
                " operator_verdicts, operation_requeues, runner_drains, runner_membership"
            )
    finally:
        engine.dispose()
    return url


@pytest.fixture(
    params=[
        "fake",
        "sqlite",
        "cached-sqlite",
        pytest.param("postgresql", marks=pytest.mark.postgres),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh, empty journal store of each kind."""
    if request.param == "fake":
        yield Backend("fake", None, _fake=FakeJournal())
    elif request.param == "sqlite":
        yield Backend("sqlite", migrated(f"sqlite:///{tmp_path / 'journal.db'}"))
    elif request.param == "cached-sqlite":
        url = migrated(f"sqlite:///{tmp_path / 'journal.db'}")
        yield Backend("cached-sqlite", url, cached=True)
    else:
        yield Backend("postgresql", emptied(request.getfixturevalue("module_postgres_journal")))


@pytest.fixture(params=["fake", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def leasing_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The stores that take §5 leases (ports.LeasingJournal). The write-through
    cache is not one: it serves a journal with one writer, so it takes no leases."""
    if request.param == "fake":
        yield Backend("fake", None, _fake=FakeJournal())
    elif request.param == "sqlite":
        yield Backend("sqlite", migrated(f"sqlite:///{tmp_path / 'journal.db'}"))
    else:
        yield Backend("postgresql", emptied(request.getfixturevalue("module_postgres_journal")))
