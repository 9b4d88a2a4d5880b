"""Issue 27: the due scan runs every --idle-poll over a journal that keeps a day
of finished turns. Its question must be answered from indexes, never by
reading every operation (500,000 kept cost about 200 ms of SQLite a scan)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from coordinator_svc.storage import migrate
from coordinator_svc.storage.statements import Dialect, Statements


@pytest.mark.parametrize("name", ["due", "due_not_queued"])
def test_the_due_scan_reads_no_table_in_full(tmp_path: Path, name: str) -> None:
    """SQLite's plan for the due scan, on a journal migrated to head, searches
    indexes only: no step of it is a SCAN of a table."""
    path = tmp_path / "journal.db"
    migrate(f"sqlite:///{path}")
    statement = getattr(Statements(Dialect("sqlite")), name)
    with sqlite3.connect(path) as db:
        plan = [
            row[3]
            for row in db.execute(
                "EXPLAIN QUERY PLAN " + statement, {"now": "2026-12-06 00:00:00", "limit": 512}
            )
        ]
    assert plan, "no plan"
    assert not [step for step in plan if step.startswith("SCAN")], plan
