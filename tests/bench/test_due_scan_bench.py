"""bench/due_scan.py times the real adapter's due scan over kept turns (never judged on speed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_due_scan_bench_prints_a_row_per_journal() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.due_scan", "--kept", "0,50", "--held", "20", "--scans", "2"],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|") for line in done.stdout.splitlines() if line.count("|") == 2]
    assert [row[0].strip() for row in rows] == ["kept", "0", "50"]
