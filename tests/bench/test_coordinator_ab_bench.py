"""bench/coordinator_ab.py runs two coordinator configurations as two live systems in
alternating rounds and prints each figure for both; the smoke run checks every figure
is there and that the flag reached B (the journal's durable transactions per turn differ
as PROTOCOL C1a says). It never looks at how fast anything was."""

from __future__ import annotations

import json

from tests.bench.invoke import run_bench

RUN_TIMEOUT = 120.0


def test_both_systems_are_measured_with_their_own_flags() -> None:
    code, stdout, stderr = run_bench(
        "coordinator_ab",
        "--quick",
        "--rounds",
        "1",
        "--json",
        "--b-arg=--queue-before-first-attempt",
        timeout=RUN_TIMEOUT,
    )
    assert code == 0, stderr
    found = json.loads(stdout)
    assert found["b_args"] == ["--queue-before-first-attempt"] and found["a_args"] == []
    for label in ("x1", "x16"):
        figures = found["medians"][label]
        assert set(figures) == {"ops/s", "p50 ms", "CPU ms/turn", "transactions/turn"}
        for row in figures.values():
            assert set(row) == {"A", "B", "B/A"}
        assert figures["ops/s"]["A"] > 0 and figures["ops/s"]["B"] > 0
    # One at a time: C1a's one transaction for acceptance and attempt (A), and the
    # two of the flag (B), plus the terminal commit each.
    assert found["medians"]["x1"]["transactions/turn"] == {"A": 2.0, "B": 3.0, "B/A": 1.5}
    assert "x16 round 1/1: B" in stderr  # the progress lines


def test_two_identical_systems_are_refused() -> None:
    code, _, stderr = run_bench("coordinator_ab", "--quick", timeout=RUN_TIMEOUT)
    assert code == 2
    assert "give A or B a flag" in stderr
