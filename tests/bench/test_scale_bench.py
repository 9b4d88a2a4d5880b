"""bench/scale.py holds turns, kills the coordinator, and reports every figure
(never judged on speed; the oracle's verdict on the kill is judged)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_scale_bench_reports_idle_cost_and_the_kill(tmp_path: Path) -> None:
    figures_file = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--sizes", "20,40", "--windows", "1",
         "--window-seconds", "1", "--settle", "0", "--kill-size", "30", "--kill-hold", "8",
         "--json", str(figures_file)],
        capture_output=True, text=True, timeout=300, check=False, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "first answer after the kill" in done.stdout
    figures = json.loads(figures_file.read_text())
    assert [size["turns"] for size in figures["sizes"]] == [20, 40]
    for size in figures["sizes"]:
        assert set(size["cpu_share"]) == {"coordinator", "runner-1", "runner-2"}
        assert all(mb > 0 for mb in size["rss_mb"].values())
    kill = figures["kill"]
    assert kill["terminal"] == {"SUCCEEDED": 30}
    assert (kill["duplicates"], kill["lost"], kill["violations"]) == (0, 0, 0)
    assert kill["first_answer_seconds"] > 0
