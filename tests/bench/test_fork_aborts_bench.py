"""bench/fork_aborts.py still runs: both sides measured, each in its own interpreter
(it never judges a rate; tests/runner/executors/test_fork_safety.py holds the rule)."""

from __future__ import annotations

import json

from tests.bench.invoke import run_bench

RUN_TIMEOUT = 60.0


def test_both_sides_are_measured_with_every_figure() -> None:
    code, stdout, stderr = run_bench(
        "fork_aborts", "--children", "3", "--json", timeout=RUN_TIMEOUT
    )
    assert code == 0, stderr
    sides = {side["handlers"]: side for side in json.loads(stdout)["sides"]}
    assert set(sides) == {"on", "off"}
    for side in sides.values():
        assert side["children"] == 3
        assert sum(side["exits"].values()) == 3
        assert side["not_exit_0"] == 3 - side["exits"].get("0", 0)
        assert side["threads_in_child_before_exec"] >= 1


def test_the_text_report_has_a_line_per_side() -> None:
    code, stdout, stderr = run_bench("fork_aborts", "--children", "2", timeout=RUN_TIMEOUT)
    assert code == 0, stderr
    assert "handlers  on: " in stdout and "handlers off: " in stdout
    assert "thread(s) between fork and exec" in stdout


def test_a_bad_count_is_refused() -> None:
    code, _, stderr = run_bench("fork_aborts", "--children", "0", timeout=RUN_TIMEOUT)
    assert code == 2 and "--children must be at least 1" in stderr
