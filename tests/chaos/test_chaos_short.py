"""The fixed chaos budget CI runs: a short seeded `turnwire chaos` on real processes.

Longer runs are the same command with more --seconds (see README). A seed
that ever fails here or there becomes a regression test named for it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHAOS_SECONDS = "18"


def _run_chaos(tmp_path: Path, seed: int, *extra: str) -> dict[str, object]:
    done = subprocess.run(
        [
            sys.executable, "-m", "turnwire.cli", "chaos",
            "--seconds", CHAOS_SECONDS, "--seed", str(seed), "--cycle", "3", "--rate", "8",
            "--data-dir", str(tmp_path / "run"), "--settle-timeout", "90", "--json", *extra,
        ],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"chaos seed {seed} exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    verdict: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return verdict


@pytest.mark.slow
def test_short_chaos_on_sqlite_holds_every_invariant(tmp_path: Path) -> None:
    """§8 1-6: a seeded chaos run (faults in cycles, restarts, load) ends PASS, not vacuous."""
    verdict = _run_chaos(tmp_path, 11)
    assert verdict["status"] == "PASS"
    # Chaos runs as a deployment does (issue 11): mutual TLS on every runner hop.
    runner_log = (tmp_path / "run" / "logs" / "runner-1.log").read_text()
    assert "mutual TLS" in runner_log
    figures = verdict["figures"]
    assert isinstance(figures, dict)
    assert figures["duplicates"] == 0 and figures["lost"] == 0
    assert figures["operations"] > 0


@pytest.mark.slow
def test_short_chaos_on_postgresql_holds_every_invariant(tmp_path: Path, postgres_url: str) -> None:
    """§8 1-6 with the journal on PostgreSQL: the same seeded chaos ends PASS."""
    verdict = _run_chaos(tmp_path, 12, "--journal-url", postgres_url)
    assert verdict["status"] == "PASS"
