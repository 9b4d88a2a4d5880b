"""The e2e bench (python -m bench e2e) still runs end to end and reports every figure (issue #4).

A smoke test so the bench cannot rot: it runs the real script (a baseline
echo server, a runner and the coordinator as processes, the client in the
script) with a few turns on SQLite, and checks the JSON has every figure with
a sane type. It never looks at how fast anything was.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from bench.e2e_processes import IN_FLIGHT
from bench.e2e_report import RPC_METHODS  # every method the bench counts
from tests.bench.invoke import run_bench

RUN_TIMEOUT = 75.0  # up to 20 s twice waiting for a quiet machine, then three levels
TURNS = 20

LATENCY_FIELDS = (
    "operations",
    "seconds",
    "ops_per_second",
    "p50_ms",
    "p99_ms",
    "p99_over_p50",
    "mean_ms",
)
SYSTEM_NUMBERS = (
    "journal_commits_per_op",
    "dispatcher_commits_per_op",
    "journal_reads_per_op",
    "runner_rpcs_per_op",
    "preflight_rpcs_per_op",
    "cpu_ms_per_op_client",
    "cpu_ms_per_op_coordinator",
    "cpu_ms_per_op_runners",
    "cpu_ms_per_op_stack",
)


def run_e2e(*args: str) -> tuple[int, str, str]:
    return run_bench("e2e", *args, timeout=RUN_TIMEOUT)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_latency(entry: dict[str, Any], expected_operations: int) -> None:
    for name in LATENCY_FIELDS:
        assert is_number(entry[name]) and entry[name] >= 0, (name, entry[name])
    assert entry["operations"] == expected_operations
    assert entry["in_flight"] in IN_FLIGHT
    # Of the unrounded figures: the rounded ms give it to within their rounding.
    assert entry["p99_over_p50"] == pytest.approx(entry["p99_ms"] / entry["p50_ms"], rel=0.01)


def expected_ops(in_flight: int) -> int:
    """--turns N: N one at a time, 2N at 16 in flight, 8N at 64 (N per 8 callers)."""
    return {1: TURNS, 16: 2 * TURNS, 64: 8 * TURNS}[in_flight]


def check_system(system: dict[str, Any]) -> None:
    check_latency(system, expected_ops(system["in_flight"]))
    assert system["journal"] == "sqlite"
    for name in ("ops_per_second_vs_baseline", "p50_vs_baseline"):
        assert is_number(system[name]) and system[name] > 0, (name, system[name])
    for name in SYSTEM_NUMBERS:
        assert is_number(system[name]) and system[name] >= 0, (name, system[name])
    journal_calls = system["journal_calls_per_op_by_method"]
    assert {"submit", "commit"} <= set(journal_calls)
    assert all(is_number(v) and v >= 0 for v in journal_calls.values())
    by_method = system["runner_rpcs_per_op_by_method"]
    assert set(RPC_METHODS) <= set(by_method)
    assert all(is_number(v) and v >= 0 for v in by_method.values())
    assert math.isclose(sum(by_method.values()), system["runner_rpcs_per_op"], abs_tol=0.01)
    assert isinstance(system["meets_commit_target"], bool)
    assert isinstance(system["meets_rpc_target"], bool)
    # Counts, not times: every op succeeded, and a succeeded op was accepted
    # (C1), written ahead (C4), dispatched and recorded terminal (C10); a first
    # attempt to a runner the live watch knows needs no preflight (C2a).
    assert system["states"] == {"SUCCEEDED": system["operations"]}
    assert system["journal_commits_per_op"] >= 3
    assert system["preflight_rpcs_per_op"] >= 0
    assert by_method["Dispatch"] >= 1
    assert system["coordinator_event_loop"] in ("uvloop", "asyncio")
    check_cpu(system)


def check_cpu(system: dict[str, Any]) -> None:
    """CPU by process: the coordinator and the runner are other processes, read by PID.

    Only that they were read (each did work for the turns, so some CPU) and
    that the stack is their sum with the client's; never how much.
    """
    assert set(system["cpu_ms_per_op_by_runner"]) == {"runner-1"}
    assert system["cpu_ms_per_op_by_runner"]["runner-1"] == system["cpu_ms_per_op_runners"]
    assert system["cpu_ms_per_op_postgresql"] is None  # SQLite: no database server
    assert system["cpu_ms_per_op_coordinator"] > 0
    assert system["cpu_ms_per_op_runners"] > 0
    parts = ("cpu_ms_per_op_client", "cpu_ms_per_op_coordinator", "cpu_ms_per_op_runners")
    assert math.isclose(sum(system[p] for p in parts), system["cpu_ms_per_op_stack"], abs_tol=0.01)
    assert all(is_number(v) and v >= 0 for v in system["dispatcher_counters"].values())


@pytest.mark.rule("C1", "C2", "C4")
@pytest.mark.slow
def test_bench_e2e_reports_every_figure_as_json() -> None:
    """Issue #4: e2e --json runs and reports baseline and SQLite figures (C1, C2, C4)."""
    code, stdout, stderr = run_e2e("--turns", str(TURNS), "--skip-postgres", "--json")
    assert code == 0, stderr[-3000:]
    report = json.loads(stdout)
    assert report["turns"] == {"1": TURNS, "16": 2 * TURNS, "64": 8 * TURNS}
    assert sorted(b["in_flight"] for b in report["baseline"]) == [1, 16, 64]
    for base in report["baseline"]:
        check_latency(base, expected_ops(base["in_flight"]))
        for name in ("cpu_ms_per_op_client", "cpu_ms_per_op_server", "cpu_ms_per_op_stack"):
            assert is_number(base[name]), (name, base[name])
    assert sorted(s["in_flight"] for s in report["systems"]) == [1, 16, 64]
    for system in report["systems"]:
        check_system(system)
    assert report["postgresql"] == {"ran": False, "skipped": "--skip-postgres"}
    assert report["target"] == {"journal_commits_per_op": 3.0, "runner_rpcs_per_op": 3.0}
    assert report["all_succeeded"] is True
    machine = report["machine"]
    assert isinstance(machine["cpus"], int) and machine["cpus"] >= 1
    assert is_number(machine["load_average_1m_before"])
    assert is_number(machine["load_average_1m_after"])


@pytest.mark.slow
def test_bench_e2e_runs_every_hop_over_tls_when_asked() -> None:
    """Issue 11: e2e --tls measures the same turns with TLS to the coordinator and
    mutual TLS to the runners (certificates made for the run); every turn succeeds."""
    code, stdout, stderr = run_e2e(
        "--turns", str(TURNS), "--in-flight", "1,16", "--skip-postgres", "--tls", "--json"
    )  # fmt: skip
    assert code == 0, stderr[-3000:]
    report = json.loads(stdout)
    assert report["tls"] is True and report["all_succeeded"] is True
    assert report["turns"] == {"1": TURNS, "16": 2 * TURNS}  # the levels asked for, only
    for system in report["systems"]:
        check_system(system)


@pytest.mark.parametrize("levels", ["0,16", "1,x", ","])
def test_bad_in_flight_levels_are_a_usage_error(levels: str) -> None:
    """--in-flight takes counts of at least 1; anything else exits 2 before starting."""
    code, stdout, stderr = run_bench("e2e", "--in-flight", levels, timeout=RUN_TIMEOUT)
    assert code == 2 and stdout == "" and "--in-flight" in stderr, stderr
