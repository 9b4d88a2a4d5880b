"""bench/grpc_costs.py still runs: every exchange kind measured against a real server
process, and the comparisons printed (it never looks at how fast anything was)."""

from __future__ import annotations

import json

from tests.bench.invoke import run_bench

RUN_TIMEOUT = 60.0


def test_every_exchange_kind_is_measured() -> None:
    code, stdout, stderr = run_bench("grpc_costs", "--ops", "40", "--json", timeout=RUN_TIMEOUT)
    assert code == 0, stderr
    found = {(c["name"], c["in_flight"]): c for c in json.loads(stdout)}
    assert set(found) == {
        ("unary", 1),
        ("stream message", 1),
        ("unary", 16),
        ("stream message", 16),
        ("unary, delayed", 1),
    }
    for cost in found.values():
        assert cost["ops_per_second"] > 0 and cost["client_cpu_ms"] > 0, cost


def test_the_text_report_compares_each_pair() -> None:
    code, stdout, stderr = run_bench(
        "grpc_costs", "--quick", "--delay-ms", "1", timeout=RUN_TIMEOUT
    )
    assert code == 0, stderr
    assert "a stream message instead of a unary call, x1:" in stdout
    assert "a stream message instead of a unary call, x16:" in stdout
    assert "a unary call answered after 1.0 ms instead of at once:" in stdout
