"""bench/capacity.py runs and reports every figure (never judged on speed)."""

from __future__ import annotations

import json

from tests.bench.invoke import run_bench


def test_capacity_bench_reports_its_figures() -> None:
    code, stdout, stderr = run_bench(
        "capacity", "--turns", "4", "--slots", "2", "--sleep-ms", "100", "--sizes-first", "--json",
        timeout=120,
    )  # fmt: skip
    assert code == 0, stderr[-2000:]
    figures = json.loads(stdout.strip().splitlines()[-1])
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
