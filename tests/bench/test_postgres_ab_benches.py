"""The A/B benches on a throwaway PostgreSQL cluster still run (bench/journal_writes.py,
bench/postgres_handoff.py): every way at 1 and 16 in flight, a figure line each. They
never look at how fast anything was."""

from __future__ import annotations

import re

import pytest

from tests.bench.invoke import run_bench
from turnwire.testing.postgres import missing_binary

RUN_TIMEOUT = 90.0

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize(
    ("script", "args", "ways", "figures_per_line"),
    [
        (
            "journal_writes",
            ("--turns", "20", "--rounds", "1"),
            ("one statement", "BEGIN ... COMMIT"),
            3,
        ),
        (
            "postgres_handoff",
            ("--writes", "20", "--rounds", "1"),
            ("worker thread", "on the loop"),
            2,
        ),
    ],
)
def test_every_way_is_measured(
    script: str, args: tuple[str, ...], ways: tuple[str, ...], figures_per_line: int
) -> None:
    if missing_binary() is not None:
        pytest.skip(f"no PostgreSQL cluster can start here: {missing_binary()} is missing")
    code, stdout, stderr = run_bench(script, *args, timeout=RUN_TIMEOUT)
    assert code == 0, stderr
    lines = [" ".join(line.split()) for line in stdout.splitlines()]
    for in_flight in (1, 16):
        for way in ways:
            line = next(line for line in lines if line.startswith(f"x{in_flight} {way} "))
            figures = [float(x) for x in re.findall(r"(\d+\.\d+) ms", line)]
            assert len(figures) == figures_per_line and figures[0] > 0, line
