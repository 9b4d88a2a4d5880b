"""bench/envelope_rows.py prints, per envelope size, the journal's and the in-row
layout's milliseconds per turn with ratios to the smallest size. Never judged on speed."""

from __future__ import annotations

import re

from tests.bench.invoke import run_bench

ROW = re.compile(r"^\s+(\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)\s+(\d+\.\d+)$", re.M)


def test_envelope_bench_prints_a_row_per_size() -> None:
    code, stdout, stderr = run_bench(
        "envelope_rows", "--turns", "3", "--sizes", "0,4096", timeout=120
    )
    assert code == 0, stderr
    rows = ROW.findall(stdout)
    assert [int(size) for size, *_ in rows] == [0, 4096]
    assert float(rows[0][2]) == 1.0 and float(rows[0][4]) == 1.0  # the smallest is the base
    assert all(float(ms) > 0 for _, ms, _, row_ms, _ in rows for ms in (ms, row_ms))


def test_bad_sizes_are_a_usage_error() -> None:
    code, _, stderr = run_bench("envelope_rows", "--sizes", "big", timeout=60)
    assert code == 2 and "--sizes must be integers" in stderr
