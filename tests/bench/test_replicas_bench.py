"""bench/replicas.py (issue 12's throughput item) still runs: 1 and 2 coordinator replicas
on one throwaway PostgreSQL journal, a runner, an echo baseline and the single-row
commit loop, as real processes, with a tiny budget. It checks every figure is there
and sane (every turn submitted came back SUCCEEDED, every process spent CPU, the
journal wrote); it never looks at how fast anything was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.bench.invoke import run_bench
from turnwire.testing.postgres import missing_binary

RUN_TIMEOUT = 240.0
TURNS = 20
COUNTS = (2,)  # one count keeps CI short; two replicas cover the per-replica figures
CONCURRENCY = 4

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def positive(figures: dict[str, Any], *keys: str) -> None:
    for key in keys:
        assert isinstance(figures[key], int | float) and figures[key] > 0, (key, figures)


@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_a_tiny_run_reports_every_figure_for_each_replica_count(tmp_path: Path) -> None:
    if missing_binary() is not None:
        pytest.skip(f"no PostgreSQL cluster can start here: {missing_binary()} is missing")
    report_file = tmp_path / "replicas.json"
    code, stdout, stderr = run_bench(
        "replicas",
        "--replicas", ",".join(str(n) for n in COUNTS),
        "--turns", str(TURNS),
        "--concurrency", str(CONCURRENCY),
        "--rounds", "1",
        "--warmup", "8",
        "--stats-wait", "2",
        "--idle-seconds", "1",
        "--pg-commit-seconds", "0.5",
        "--json", str(report_file),
        "--out", str(tmp_path / "data"),
        timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert code == 0, stderr[-3000:]
    report = json.loads(report_file.read_text())
    assert report["all_succeeded"] is True
    assert [c["replicas"] for c in report["counts"]] == list(COUNTS)
    for count in report["counts"]:
        names = [f"replica-{i}" for i in range(1, count["replicas"] + 1)]
        (only,) = count["rounds"]
        assert only["submitted"] == only["completed"] == only["succeeded"] == TURNS, only
        assert only["states"] == {"SUCCEEDED": TURNS}
        median = count["median"]
        positive(median, "turns_per_second", "echo_ops_per_second", "x_echo", "p50_ms")
        assert median["p99_ms"] >= median["p50_ms"]
        cpu = median["cpu_ms_per_turn"]
        positive(cpu, *names, "runner-1", "coordinators", "runners", "postgresql", "client")
        assert cpu["total"] == pytest.approx(
            cpu["client"] + cpu["coordinators"] + cpu["runners"] + cpu["postgresql"], rel=1e-3
        )
        positive(median["cpu_ms_per_accepted_turn"], *names)
        positive(median, "write_xacts_per_turn", "wal_bytes_per_turn")
        assert median["xacts_per_turn"] >= 0 and median["wal_flushes_per_turn"] >= 0
        assert 0 < median["busy_cores"]["machine"] <= report["cpus"] + 0.01
        positive(count["ceilings"], "machine", "coordinator_core", "postgresql_core")
    rates = report["pg_commit_rate"]
    assert [r["connections"] for r in rates] == [1, CONCURRENCY]
    for rate in rates:
        positive(rate, "commits", "commits_per_second", "server_cpu_ms_per_commit")
    # The printed table: a row per replica count, the paragraph, a progress line per round.
    for replicas in COUNTS:
        assert any(line.startswith(f"| {replicas} | ") for line in stdout.splitlines())
        assert f"{replicas} replica(s) round 1/1:" in stderr
    assert "turns/s" in report["paragraph"] and report["paragraph"] in stdout
