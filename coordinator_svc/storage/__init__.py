"""The coordinator's durable journal: adapters for the ``ports.Journal`` port.

- ``open_journal(url)`` (sync) -> ``SqlJournal`` on SQLite or PostgreSQL;
  refuses an unmigrated journal (JournalNotMigrated) or one written by newer
  code (SchemaTooNew). It never changes the schema.
- ``migrate(url)`` (sync): upgrade the schema to this code's head revision.
- ``FakeJournal``: in memory, for tests of everything above the journal.

All three journals pass the same contract suite in ``tests/coordinator/storage``.
"""

from typing import TYPE_CHECKING

from coordinator_svc.storage.fake import FakeJournal
from coordinator_svc.storage.schema import alembic_config, head_revision, migrate
from coordinator_svc.storage.sql import SqlJournal, open_journal

__all__ = [
    "FakeJournal",
    "SqlJournal",
    "alembic_config",
    "head_revision",
    "migrate",
    "open_journal",
]

if TYPE_CHECKING:
    from coordinator_svc.ports import Journal

    def _both_implement_the_port(fake: FakeJournal, sql: SqlJournal) -> tuple[Journal, Journal]:
        return fake, sql  # mypy proves each adapter satisfies the Journal protocol
