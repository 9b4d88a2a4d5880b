"""python -m bench ab_trees: the e2e bench on two source trees, in alternating runs (issue 26).

The table's arithmetic is checked on made-up reports; a smoke run of the real
script (both trees this repository) checks every figure heading is printed.
Neither looks at how fast anything was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.ab_trees import FIGURES, print_backend
from bench.e2e_processes import IN_FLIGHT
from tests.bench.invoke import run_bench

REPO_ROOT = Path(__file__).resolve().parents[2]

RUN_TIMEOUT = 240.0  # two quick e2e runs, each waiting up to 20 s for a quiet machine twice


def made_up_report(ops_per_second: float, levels: tuple[int, ...] = IN_FLIGHT) -> dict[str, Any]:
    systems = [
        {"journal": "sqlite", "in_flight": n, "ops_per_second": ops_per_second * n} for n in levels
    ]
    return {"systems": systems, "postgresql": {"skipped": "--skip-postgres"}}


def test_the_table_shows_medians_their_ratio_and_every_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each figure: the median of each tree's runs, candidate/baseline, and every run's value."""
    reports = {
        "baseline": [made_up_report(v) for v in (100.0, 80.0, 90.0)],
        "candidate": [made_up_report(v) for v in (99.0, 108.0, 117.0)],
    }
    print_backend("sqlite", "SQLite", reports)
    print_backend("postgresql", "PostgreSQL", reports)
    text = capsys.readouterr().out
    assert "x1 ops/s" in text and "90.000   108.000     1.200   100 80 90 | 99 108 117" in text
    assert "x16 ops/s" in text and "1600 1280 1440 | 1584 1728 1872" in text
    assert "p50 ms" not in text  # a figure no run reported is left out
    assert "PostgreSQL\n  skipped: --skip-postgres" in text


def test_a_level_only_one_tree_measured_is_shown_with_dashes_for_the_other(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An older baseline's e2e measured 1 and 16 in flight only: the candidate's 64 is
    still shown, the baseline's cells and the ratio "-"."""
    reports = {
        "baseline": [made_up_report(100.0, (1, 16))],
        "candidate": [made_up_report(110.0, (1, 16, 64))],
    }
    print_backend("sqlite", "SQLite", reports)
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if "x64 ops/s " in line)
    # baseline, candidate, cand/base, then each run: the baseline's one "-", the candidate's.
    assert line.split()[2:] == ["-", "7040.000", "-", "-", "|", "7040"]


def test_a_tree_without_the_bench_is_refused() -> None:
    """--baseline must be a checkout with bench/e2e.py; anything else stops before measuring."""
    code, _stdout, stderr = run_bench(
        "ab_trees", "--baseline", str(REPO_ROOT / "docs"), timeout=60.0
    )
    assert code == 2 and "no bench/e2e.py there" in stderr, stderr


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_a_quick_run_prints_every_figure_for_both_trees() -> None:
    """A quick run (both trees this repository): heads, where each imports from, load
    averages, and every SQLite figure at 1 and 16 in flight; PostgreSQL said skipped."""
    code, stdout, stderr = run_bench(
        "ab_trees",
        *("--baseline", str(REPO_ROOT), "--quick", "--skip-postgres", "--rounds", "1"),
        timeout=RUN_TIMEOUT,
    )
    assert code == 0, stderr[-3000:]
    for side in ("baseline", "candidate"):
        assert f"{side}: {REPO_ROOT} (HEAD " in stdout, stdout
        for package in ("coordinator_svc", "runner_svc", "turnwire"):
            assert f"{side} imports {package} from {REPO_ROOT}/{package}/" in stdout, stdout
    assert "load average at start:" in stdout and "load average at end:" in stdout
    sqlite, postgres = stdout.split("\nSQLite\n")[1].split("\nPostgreSQL\n")
    for in_flight in IN_FLIGHT:
        for heading, _key in FIGURES:
            shown = f"x{in_flight} {heading} " in sqlite
            assert shown == (heading != "CPU ms/op postgresql"), (heading, sqlite)
    assert postgres.strip() == "skipped: --skip-postgres"
    assert "round 1/1: baseline done" in stderr and "round 1/1: candidate done" in stderr
