"""bench/turn_walk.py still runs: one traced turn, every figure printed.

It runs the real script (a runner and a coordinator in its process, on
127.0.0.1:0) and checks each figure is there and is a count; how many files a
turn visits is what the script is for, so no count is pinned here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.bench.invoke import run_bench

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("coordinator_svc", "runner_svc", "turnwire")
COLUMNS = ("files", "functions", "entries", "returns", "resumptions")
SCRIPT_TIMEOUT = "40"
RUN_TIMEOUT = 60.0


def test_the_json_has_every_figure_per_package() -> None:
    """--json: every count per package, the top files and the definition of a return."""
    code, stdout, stderr = run_bench(
        "turn_walk", "--timeout", SCRIPT_TIMEOUT, "--top", "5", "--json", timeout=RUN_TIMEOUT
    )
    assert code == 0, stderr
    found = json.loads(stdout)
    assert found["states"] == ["OPERATION_STATE_SUCCEEDED"] * 2  # the warm-up, the traced turn
    assert set(found["packages"]) == set(PACKAGES)
    for name, row in found["packages"].items():
        assert set(row) == set(COLUMNS), name
        assert all(isinstance(row[column], int) and row[column] >= 0 for column in COLUMNS)
        # The paths it measured are this checkout's, not some other install.
        assert Path(found["package_paths"][name]) == REPO_ROOT / name
    # A turn that succeeded went through the coordinator's code.
    assert found["packages"]["coordinator_svc"]["entries"] > 0
    assert 0 < len(found["top_returns"]) <= 5
    for path, count in found["top_returns"]:
        assert path.split("/", 1)[0] in PACKAGES and path.endswith(".py")
        assert isinstance(count, int) and count > 0
    assert "another file" in found["return_definition"]


def test_the_text_report_prints_the_table_the_definition_and_the_top_files() -> None:
    """The text report: where each package came from, its row, the definition, the top files."""
    code, stdout, stderr = run_bench("turn_walk", "--timeout", SCRIPT_TIMEOUT, timeout=RUN_TIMEOUT)
    assert code == 0, stderr
    assert re.search(r"^package\s+" + r"\s+".join(COLUMNS) + "$", stdout, re.MULTILINE)
    for name in PACKAGES:
        assert re.search(rf"^{name}: /", stdout, re.MULTILINE), name  # where it was imported from
        assert re.search(rf"^{name}(\s+\d+){{5}}$", stdout, re.MULTILINE), name
    assert "returns: a return to file F = " in stdout
    top = stdout.split("top 10 files by returns:\n", 1)[1].splitlines()
    assert 0 < len(top) <= 10
    assert all(re.fullmatch(r"\s+\d+\s+\S+\.py", line) for line in top)


def test_bad_arguments_are_refused() -> None:
    """A bad argument exits 2 and says which one."""
    code, _, stderr = run_bench("turn_walk", "--top", "0", timeout=RUN_TIMEOUT)
    assert code == 2 and "--top at least 1" in stderr
