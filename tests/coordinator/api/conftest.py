"""Journal backends for the API tests: the in-memory fake, a real SQLite file,
and (for the idempotency tests) a throwaway PostgreSQL when one is available."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from coordinator_svc.ports import Journal
from coordinator_svc.storage import FakeJournal

T = TypeVar("T")


@dataclass
class Store:
    """One journal store; ``open()`` gives a handle (a new one per call on SQL)."""

    name: str
    url: str | None
    fake: FakeJournal | None = None
    opened: list[Any] = field(default_factory=list)

    def open(self) -> Journal:
        if self.fake is not None:
            return self.fake
        from coordinator_svc.storage import open_journal

        assert self.url is not None
        journal = open_journal(self.url)
        self.opened.append(journal)
        return journal

    def run(self, scenario: Callable[[Journal], Awaitable[T]]) -> T:
        """Run ``scenario(journal)`` on a fresh event loop; close every SQL handle after."""

        async def main() -> T:
            try:
                return await scenario(self.open())
            finally:
                for journal in self.opened:
                    await journal.close()
                self.opened.clear()

        return asyncio.run(main())


def _migrated(url: str) -> str:
    from coordinator_svc.storage import migrate

    migrate(url)
    return url


def _postgres_url(request: pytest.FixtureRequest) -> str:
    for name in ("postgres_url", "pg_url"):
        try:
            return str(request.getfixturevalue(name))
        except pytest.FixtureLookupError:
            continue
    pytest.skip("no PostgreSQL fixture (postgres_url / pg_url) is defined in tests/conftest.py")


def _make_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if kind == "fake":
        return Store("fake", None, fake=FakeJournal())
    if kind == "sqlite":
        return Store("sqlite", _migrated(f"sqlite:///{tmp_path / 'journal.db'}"))
    return Store("postgresql", _migrated(_postgres_url(request)))


@pytest.fixture(params=["fake", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Fake and SQLite: every API behaviour runs on both."""
    yield _make_store(request.param, request, tmp_path)


@pytest.fixture(params=["fake", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def idem_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Fake, SQLite and PostgreSQL: for the idempotency tests (C1, §7)."""
    yield _make_store(request.param, request, tmp_path)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    """A real SQLite journal only (tests that need a second handle = another replica)."""
    yield Store("sqlite", _migrated(f"sqlite:///{tmp_path / 'journal.db'}"))
