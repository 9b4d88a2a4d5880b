"""bench/capacity.py runs and reports every figure (never judged on speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_capacity_bench_reports_its_figures() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "capacity.py"), "--turns", "4", "--slots", "2",
         "--sleep-ms", "100", "--sizes-first", "--json"],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["states"] == {"SUCCEEDED": 4}
    assert figures["executor_starts"] == 4
    assert set(figures) == {
        "turns",
        "slots",
        "states",
        "refused_dispatches",
        "executor_starts",
        "wall_seconds",
        "ideal_seconds",
    }
