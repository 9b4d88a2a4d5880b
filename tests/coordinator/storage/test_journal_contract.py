"""The Journal contract (``turnwire.testing``) run against every journal we ship.

The cases live in the public suite, so a user's own journal backend runs the
very same ones; here each adapter only says how to open a fresh store.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator_svc.storage import FakeJournal, open_journal
from coordinator_svc.storage.cached import CachedJournal
from tests.coordinator.storage.conftest import emptied, migrated
from turnwire.testing import (
    JournalConformance,
    JournalFactory,
    LeasingJournalConformance,
    single_handle,
)


@pytest.mark.rule("O2", "O3")
class TestFakeJournal(LeasingJournalConformance):
    @pytest.fixture
    def journal_factory(self) -> JournalFactory:
        return single_handle(FakeJournal)


@pytest.mark.rule("O2", "O3")
class TestSqliteJournal(LeasingJournalConformance):
    @pytest.fixture
    def journal_factory(self, tmp_path: Path) -> JournalFactory:
        url = migrated(f"sqlite:///{tmp_path / 'journal.db'}")
        return lambda: open_journal(url)  # each call another replica's handle


class TestCachedSqliteJournal(JournalConformance):
    """The coordinator's own stack: SQLite behind the write-through cache. It
    serves a journal with one writer, so every handle is the same one and it
    takes no leases (not a LeasingJournal)."""

    @pytest.fixture
    def journal_factory(self, tmp_path: Path) -> JournalFactory:
        url = migrated(f"sqlite:///{tmp_path / 'journal.db'}")
        return single_handle(lambda: CachedJournal(open_journal(url)))


@pytest.mark.rule("O2", "O3")
@pytest.mark.postgres
class TestPostgresJournal(LeasingJournalConformance):
    @pytest.fixture
    def journal_factory(self, module_postgres_journal: str) -> JournalFactory:
        url = emptied(module_postgres_journal)  # one database per module, emptied per case
        return lambda: open_journal(url)
