"""Every bench and verification tool the pages run is one that exists, by that name.

The pages run benches as ``python -m bench NAME`` and the long verification
runs as ``python -m tests.simulation.explore`` and the like, in code blocks and
in running text. A bench renamed or moved would leave the pages naming
nothing; this reads README.md and docs/*.md and checks each name: NAME is a
bench ``python -m bench --help`` lists, a module is one Python finds. It does
not run them (tests/bench runs each bench).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from bench.__main__ import benches

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
BENCH_RUN = re.compile(r"python -m bench\s+([a-z0-9][a-z0-9_-]*)")
MODULE_RUN = re.compile(r"python -m ((?:bench|tests)\.[a-z0-9_.]*[a-z0-9_])")


def runs(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    return [
        (page.relative_to(ROOT).as_posix(), match.group(1))
        for page in PAGES
        for match in pattern.finditer(page.read_text(encoding="utf-8"))
    ]


def test_every_bench_a_page_runs_is_listed() -> None:
    names = {b.name for b in benches()}
    found = runs(BENCH_RUN)
    assert len(found) >= 20  # the scan finds what PERFORMANCE.md holds
    assert [(page, name) for page, name in found if name.replace("-", "_") not in names] == []


def test_every_module_a_page_runs_exists() -> None:
    found = runs(MODULE_RUN)
    assert {"tests.simulation.explore", "tests.security.fuzz_long_run"} <= {m for _, m in found}
    assert [(page, m) for page, m in found if importlib.util.find_spec(m) is None] == []
