"""bench/postgres_handoff.py still runs: both ways of sending a write, one at a time and
16 at once, on a throwaway cluster (it never looks at how fast anything was)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.bench.test_bench_smoke import run_script
from tests.support.postgres import missing_binary

BENCH = Path(__file__).resolve().parents[2] / "bench" / "postgres_handoff.py"
RUN_TIMEOUT = 90.0

pytestmark = pytest.mark.postgres


def test_both_ways_are_measured() -> None:
    if missing_binary() is not None:
        pytest.skip(f"no PostgreSQL cluster can start here: {missing_binary()} is missing")
    code, stdout, stderr = run_script(BENCH, "--writes", "20", "--rounds", "1", timeout=RUN_TIMEOUT)
    assert code == 0, stderr
    lines = [" ".join(line.split()) for line in stdout.splitlines()]
    for in_flight in (1, 16):
        for way in ("worker thread", "on the loop"):
            line = next(line for line in lines if line.startswith(f"x{in_flight} {way} "))
            figures = [float(x) for x in re.findall(r"(\d+\.\d+) ms", line)]
            assert len(figures) == 2 and figures[0] > 0, line
