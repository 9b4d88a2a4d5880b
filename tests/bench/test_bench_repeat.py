"""python -m bench e2e --repeat: the median run, whole, with every run's ratios (pure)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from bench import peers_table
from bench.e2e_report import BaselineResult, Report, median_run, print_report
from tests.bench.test_bench_peers import figures, system


def report(echo: float, sqlite_x1: float, sqlite_x16: float, *, ok: bool = True) -> Report:
    x16 = system("sqlite", 16, sqlite_x16)
    if not ok:
        x16 = type(x16)(**{**x16.__dict__, "states": {"SUCCEEDED": 9, "FAILED": 1}})
    return Report(
        {1: 10, 16: 20},
        [
            BaselineResult(1, figures(echo), 0.1, 0.2),
            BaselineResult(16, figures(echo * 2), 0.1, 0.2),
        ],
        [system("sqlite", 1, sqlite_x1), x16],
        "--skip-postgres",
        load_before=0.0,
        load_after=0.0,
        cpus=2,
    )


def test_the_median_run_is_kept_whole_beside_its_own_echo() -> None:
    """Three runs scoring 0.05, 0.20 and 0.10 mean x echo: the 0.10 one is reported,
    its rows and its echo together, and every run's ratios are listed."""
    runs = [
        report(1000.0, 50.0, 100.0),  # x echo 0.05, 0.05
        report(500.0, 100.0, 200.0),  # 0.20, 0.20
        report(1000.0, 100.0, 200.0),  # 0.10, 0.10
    ]
    chosen = median_run(runs)
    assert chosen.chosen_run == 3
    assert chosen.baseline == runs[2].baseline and chosen.systems == runs[2].systems
    assert [round(r.score, 3) for r in chosen.runs] == [0.05, 0.2, 0.1]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_report(chosen)
    text = out.getvalue()
    assert "runs: 3; the figures above are run 3" in text
    assert "run 2: mean 0.200 (sqlite x1 0.200, sqlite x16 0.200)" in text


def test_an_even_count_takes_the_lower_median_and_one_run_lists_nothing() -> None:
    runs = [report(1000.0, 300.0, 600.0), report(1000.0, 100.0, 200.0)]
    assert median_run(runs).chosen_run == 2
    single = median_run([runs[0]])
    assert single.runs == () and single.chosen_run == 1
    with pytest.raises(ValueError):
        median_run([])


def test_a_failed_turn_in_any_run_marks_the_report_not_succeeded() -> None:
    """The median run may be a clean one; the report still says a run broke."""
    runs = [
        report(1000.0, 50.0, 100.0, ok=False),
        report(1000.0, 100.0, 200.0),
        report(1000.0, 200.0, 400.0),
    ]
    chosen = median_run(runs)
    assert chosen.chosen_run == 2 and chosen.systems[1].succeeded
    assert not chosen.all_succeeded


def test_the_peers_table_says_which_run_it_shows() -> None:
    runs = [report(1000.0, 50.0, 100.0), report(1000.0, 100.0, 200.0)]
    chosen = median_run(runs)
    peer_run = peers_table.PeerRun(Path("/tmp/x"), [], [], 0, 0.0, 1.0, ["run_all.py"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        peers_table.print_table(peer_run, chosen, 0.0, 1.0)
    assert "the median of 2 runs (run 1)" in out.getvalue()
