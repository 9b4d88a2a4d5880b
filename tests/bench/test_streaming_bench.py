"""bench/streaming.py (PROTOCOL.md §12) runs at a small size and prints every figure.

A smoke run only: real runner and coordinator processes, three turns for one
second. It checks the figures are there and that nothing was lost or
reordered (S2: none without a crash); it never looks at how fast anything was.
"""

from __future__ import annotations

import json

from tests.bench.invoke import run_bench


def test_the_streaming_bench_runs_small_and_loses_nothing() -> None:
    code, out, err = run_bench(
        "streaming", "--turns", "3", "--rate", "20", "--seconds", "1", "--json", timeout=120.0
    )
    assert code == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["chunks_expected"] == 60
    assert (report["delivered"], report["lost"], report["reordered"]) == (60, 0, 0)
    assert report["failed_turns"] == 0
    assert set(report["cpu_us_per_chunk"]) == {"runner", "coordinator", "client"}
    assert report["p50_ms"] >= 0 and report["p99_ms"] >= report["p50_ms"]
