"""The oracle reads a coordinator journal on PostgreSQL exactly as on SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.run_builder import RunBuilder, invariants


@pytest.mark.postgres
def test_oracle_judges_a_postgresql_journal(postgres_url: str, tmp_path: Path) -> None:
    """§8 1-6 on a PostgreSQL journal: a clean mix passes, a crafted second start is caught."""
    run = RunBuilder(tmp_path, journal_url=postgres_url)
    try:
        inc = run.start_runner()
        run.lost_reply("op-lost", inc)
        run.replayed("op-replay", inc)
        run.ambiguous("op-ambiguous", inc)
        verdict = run.verdict()
        assert verdict.violations == ()
        assert (verdict.figures.replays, verdict.figures.ambiguous) == (1, 1)
        run.ledger_line("op-replay", inc.incarnation_id, 2)
        assert 1 in invariants(run.verdict())
    finally:
        run.close()
