"""bench/journal_writes.py still runs: both PostgreSQL write forms on a throwaway
cluster, a figure per form (it never looks at how fast anything was)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.bench.test_bench_smoke import run_script
from tests.support.postgres import missing_binary

BENCH = Path(__file__).resolve().parents[2] / "bench" / "journal_writes.py"
RUN_TIMEOUT = 90.0

pytestmark = pytest.mark.postgres


def test_both_write_forms_are_measured_on_the_real_journal() -> None:
    if missing_binary() is not None:
        pytest.skip(f"no PostgreSQL cluster can start here: {missing_binary()} is missing")
    code, stdout, stderr = run_script(BENCH, "--turns", "20", "--rounds", "1", timeout=RUN_TIMEOUT)
    assert code == 0, stderr
    lines = [" ".join(line.split()) for line in stdout.splitlines()]
    for in_flight in (1, 16):
        for form in ("one statement", "BEGIN ... COMMIT"):
            line = next(line for line in lines if line.startswith(f"x{in_flight} {form} "))
            figures = [float(x) for x in re.findall(r"(\d+\.\d+) ms", line)]
            assert len(figures) == 3 and figures[0] > 0, line
