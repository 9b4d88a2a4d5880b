"""bench/floor.py: Turnwire's shape with no work in it, and the floor it puts under e2e's ratios.

The arithmetic is checked on made-up figures; a smoke run of the real script
(an echo backend and a relay middle as processes) checks every figure is
there. Neither looks at how fast anything was.
"""

from __future__ import annotations

import json

import pytest

from bench.baseline import Figures
from bench.floor import COMMITS_ON_THE_PATH, Floor, Loop
from tests.bench.invoke import run_bench

RUN_TIMEOUT = 60.0


def loop(name: str, in_flight: int, ops_per_second: float, mean_ms: float) -> Loop:
    count = 10
    figures = Figures(name, count, count / ops_per_second, tuple([mean_ms / 1000] * count))
    return Loop(name, in_flight, figures, cpu_ms_per_op=1.0)


def made_up_floor() -> Floor:
    return Floor(
        (
            loop("echo", 1, 1000.0, 1.0),
            loop("relay", 1, 500.0, 2.0),
            loop("echo", 16, 4000.0, 4.0),
            loop("relay", 16, 1000.0, 16.0),
        ),
        commit_ms=0.3,
        commit_cpu_ms=0.2,
    )


@pytest.mark.rule("C1a")
def test_the_sequential_floor_is_the_relay_plus_five_commits_in_a_row() -> None:
    """PROTOCOL C1a: the acceptance carries the first attempt, so a turn waits for
    two journal commits and three runner transactions in a row."""
    floor = made_up_floor()
    assert COMMITS_ON_THE_PATH == 4
    assert floor.sequential_floor_ms == pytest.approx(2.0 + 4 * 0.3)  # 3.2 ms a turn
    assert floor.sequential_floor_ops == pytest.approx(1000 / 3.2)
    assert floor.sequential_floor_x_echo == pytest.approx(1000 / 3.2 / 1000)
    # The CPU floor: the relay's stack CPU (1.0 ms) and five commits' CPU.
    assert floor.sequential_cpu_floor_ms == pytest.approx(1.0 + 4 * 0.2)
    assert floor.x_echo("relay", 1) == pytest.approx(0.5)
    assert floor.x_echo("relay", 16) == pytest.approx(0.25)


def test_the_report_says_what_the_targets_leave_for_turnwires_own_work() -> None:
    text = "\n".join(made_up_floor().lines())
    # 0.20x of 1000 ops/s is 200 ops/s, 5 ms a turn; the floor takes 3.2 ms of it.
    assert "= 200.0 ops/s, a turn in 5.00 ms: 1.80 ms left" in text
    assert "sequential floor: relay mean + 4 commits = 3.20 ms a turn" in text
    assert "relay stack CPU + 4 such commits = 1.80 ms a turn" in text
    assert "4 ms target leaves 2.20 ms" in text
    assert "the relay alone runs 0.250x" in text


def test_the_script_measures_every_loop_and_the_commit() -> None:
    code, stdout, stderr = run_bench("floor", "--ops", "20", "--json", timeout=RUN_TIMEOUT)
    assert code == 0, stderr
    found = json.loads(stdout)
    assert sorted((x["name"], x["in_flight"]) for x in found["loops"]) == [
        ("echo", 1),
        ("echo", 16),
        ("relay", 1),
        ("relay", 16),
    ]
    for entry in found["loops"]:
        assert entry["ops_per_second"] > 0 and entry["cpu_ms_per_op"] > 0, entry
    assert found["commit_ms"] > 0 and found["commit_cpu_ms_through_a_thread"] > 0
    assert found["sequential_cpu_floor_ms"] > found["loops"][1]["cpu_ms_per_op"]
    assert found["sequential_floor_ms"] > found["loops"][1]["mean_ms"]
    assert "relay x16" in stderr  # the progress lines
