"""bench/scheduler.py runs every scenario and reports its figures (never judged on
speed: the correctness figures only, which a working scheduler always meets)."""

from __future__ import annotations

import json

from tests.bench.invoke import run_bench


def test_scheduler_bench_reports_every_scenario() -> None:
    code, stdout, stderr = run_bench("scheduler", "--quick", "--json", timeout=300)
    assert code == 0, stderr[-2000:]
    figures = json.loads(stdout.strip().splitlines()[-1])
    for run in (figures["capacity"], figures["capacity_with_loss"]):
        assert run["states"] == {"SUCCEEDED": 12}, run
        assert (run["duplicates"], run["lost_not_terminal"], run["capacity_refusals"]) == (0, 0, 0)
        assert run["utilisation_while_waiting"] is not None
    flood = figures["flood"]
    assert flood["beside_flood"]["flood_turns_submitted"] > 0
    assert flood["alone"]["quiet_succeeded"] == flood["alone"]["quiet_turns"]
    assert flood["quiet_p99_ratio"] is not None
    lag = figures["result_lag"]
    assert lag["settled_turns_measured"] > 0 and lag["lag_p99_s"] >= 0
