"""The e2e bench on two source trees, in alternating runs in one window (issue 26).

    .venv/bin/python -m bench ab_trees --baseline ../turnwire-before [--candidate .]
        [--rounds 3] [--turns N] [--skip-postgres] [--quick] [--e2e-arg=--tls ...]

Runs each tree's own e2e bench with ``--json`` (``python -m bench e2e`` where
bench/ is a package, ``bench/e2e.py`` in a tree from before) for the baseline
tree, then the candidate, then the baseline again, ``--rounds`` times each, so
drift in the machine's load hits both. Each run has ``PYTHONPATH=<tree>`` and
its working directory in the tree, so the bench and every process it starts
(by ``python -m``, or the coordinator by path in an older tree) import that
tree's code; before measuring, it shows where each tree's packages import from
and stops if that is not the tree.

Per backend (SQLite, PostgreSQL) it prints each figure e2e reports at every
in-flight level either tree measured (1 and 16; 64 too from trees whose e2e
runs it): the baseline and candidate medians, candidate/baseline, and every
run's value ("-" where a tree did not report it). ops/s: higher is better;
ms, p99/p50 and CPU ms/op: lower is better.
It prints figures and never judges speed: exit 0 unless a run broke.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.e2e_processes import run_within

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("coordinator_svc", "runner_svc", "turnwire")
BACKENDS = (("sqlite", "SQLite"), ("postgresql", "PostgreSQL"))
# (heading, e2e's JSON key) for each figure, shown at every in-flight count.
FIGURES = (
    ("ops/s", "ops_per_second"),
    ("ops/s x echo", "ops_per_second_vs_baseline"),
    ("p50 ms", "p50_ms"),
    ("p99 ms", "p99_ms"),
    ("p99/p50", "p99_over_p50"),
    ("CPU ms/op client", "cpu_ms_per_op_client"),
    ("CPU ms/op coordinator", "cpu_ms_per_op_coordinator"),
    ("CPU ms/op runners", "cpu_ms_per_op_runners"),
    ("CPU ms/op postgresql", "cpu_ms_per_op_postgresql"),
    ("CPU ms/op stack", "cpu_ms_per_op_stack"),
)
RUN_TIMEOUT = 1800.0  # one whole e2e run
STOP_TIMEOUT = 30.0  # for e2e to stop its processes after SIGTERM
CHECK_TIMEOUT = 60.0  # the import check, git


def progress(line: str) -> None:
    print(f"[ab] {line}", file=sys.stderr, flush=True)


def tree_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def check_imports(name: str, tree: Path) -> None:
    """Print where each package imports from under PYTHONPATH=tree (run from /, so the
    working directory does not help); exit if any is not inside the tree."""
    for package in PACKAGES:
        code = f"import {package}; print({package}.__file__)"
        found = subprocess.run(
            [sys.executable, "-c", code],
            env=tree_env(tree),
            cwd="/",
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT,
        )
        where = found.stdout.strip() or (found.stderr.strip().splitlines() or ["?"])[-1]
        print(f"{name} imports {package} from {where}")
        if found.returncode != 0 or not Path(where).resolve().is_relative_to(tree):
            raise SystemExit(f"ab_trees.py: {package} does not import from {tree}; stopping")


def git_head(tree: Path) -> str:
    found = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT,
    )
    return found.stdout.strip() if found.returncode == 0 else "(not a git checkout)"


def e2e_command(tree: Path) -> list[str]:
    """How the tree runs its e2e bench: as a package module, or (a tree from before
    bench/ was a package) as a script; a baseline is often an older commit."""
    if (tree / "bench" / "__main__.py").is_file():
        return [sys.executable, "-m", "bench", "e2e"]
    return [sys.executable, str(tree / "bench" / "e2e.py")]


def run_e2e(tree: Path, e2e_args: list[str]) -> dict[str, Any]:
    """One e2e ``--json`` run of the tree (in the tree); its report. Exits if it broke;
    on overrun SIGTERM (e2e stops its processes by PID), then SIGKILL."""
    argv = [*e2e_command(tree), "--json", *e2e_args]
    done = run_within(argv, RUN_TIMEOUT, cwd=tree, env=tree_env(tree), grace=STOP_TIMEOUT)
    if done is None:
        raise SystemExit(f"ab_trees.py: e2e in {tree} ran past {RUN_TIMEOUT:.0f}s")
    code, stdout, stderr = done
    if code != 0:
        print(stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"ab_trees.py: e2e in {tree} exited {code}")
    report: dict[str, Any] = json.loads(stdout)
    return report


def figure(report: dict[str, Any], journal: str, in_flight: int, key: str) -> float | None:
    for system in report["systems"]:
        if system["journal"] == journal and system["in_flight"] == in_flight:
            value = system.get(key)
            return float(value) if isinstance(value, int | float) else None
    return None


def levels(reports: dict[str, list[dict[str, Any]]]) -> list[int]:
    """Every in-flight level any run of either tree reported (an older tree's e2e may
    measure fewer: its cells are "-")."""
    return sorted({s["in_flight"] for runs in reports.values() for r in runs for s in r["systems"]})


def median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def shown(value: float | None, spec: str) -> str:
    """A figure as ``spec`` formats it; a missing one as "-" as wide."""
    return format(value, spec) if value is not None else "-".rjust(len(format(0.0, spec)))


def print_backend(journal: str, title: str, reports: dict[str, list[dict[str, Any]]]) -> None:
    print(f"\n{title}")
    skipped = {r["postgresql"]["skipped"] for r in reports["baseline"] + reports["candidate"]}
    if journal == "postgresql" and skipped != {None}:
        print(f"  skipped: {', '.join(sorted(str(s) for s in skipped if s))}")
        return
    print(f"  {'figure':<26} {'baseline':>9} {'candidate':>9} {'cand/base':>9}   runs (B | C)")
    for in_flight in levels(reports):
        for heading, key in FIGURES:
            runs = {
                side: [figure(r, journal, in_flight, key) for r in reports[side]]
                for side in ("baseline", "candidate")
            }
            if all(v is None for values in runs.values() for v in values):
                continue  # not reported for this backend (the PostgreSQL server's CPU)
            base, cand = (median(runs[side]) for side in ("baseline", "candidate"))
            ratio = cand / base if base and cand is not None else None
            spread = " | ".join(" ".join(shown(v, "g") for v in values) for values in runs.values())
            cells = " ".join(shown(v, "9.3f") for v in (base, cand, ratio))
            print(f"  {f'x{in_flight} {heading}':<26} {cells}   {spread}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--baseline", type=Path, required=True, help="the older tree (e.g. a git worktree)"
    )
    parser.add_argument(
        "--candidate", type=Path, default=REPO_ROOT, help=f"the newer tree (default {REPO_ROOT})"
    )
    parser.add_argument("--rounds", type=int, default=3, help="e2e runs per tree (default 3)")
    parser.add_argument(
        "--turns", type=int, help="e2e's --turns (default e2e's own: 300, 30 with --quick)"
    )
    parser.add_argument("--skip-postgres", action="store_true", help="measure SQLite only")
    parser.add_argument("--quick", action="store_true", help="a smoke run: e2e's --quick")
    parser.add_argument(
        "--e2e-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for every e2e run (repeatable; --e2e-arg=--tls)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or (args.turns is not None and args.turns < 1):
        parser.error("--rounds and --turns must be >= 1")
    for side in ("baseline", "candidate"):
        tree = getattr(args, side).resolve()
        if not (tree / "bench" / "e2e.py").is_file():
            parser.error(f"--{side} {tree}: no bench/e2e.py there")
        setattr(args, side, tree)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    e2e_args = ["--turns", str(args.turns)] if args.turns else []
    e2e_args += ["--skip-postgres"] * args.skip_postgres + ["--quick"] * args.quick + args.e2e_arg
    trees = {"baseline": args.baseline, "candidate": args.candidate}
    print(f"python -m bench ab_trees: e2e --json {' '.join(e2e_args)}".rstrip())
    print(f"date: {datetime.now(UTC).isoformat(timespec='seconds')}")
    for side, tree in trees.items():
        print(f"{side}: {tree} (HEAD {git_head(tree)}; the work tree may differ)")
    for side, tree in trees.items():
        check_imports(side, tree)
    print(f"order: baseline, candidate, ... x{args.rounds} each; {os.cpu_count()} CPUs")
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    reports: dict[str, list[dict[str, Any]]] = {side: [] for side in trees}
    for number in range(1, args.rounds + 1):
        for side, tree in trees.items():
            progress(f"round {number}/{args.rounds}: {side} ({tree})")
            report = run_e2e(tree, e2e_args)
            reports[side].append(report)
            machine = report["machine"]
            progress(
                f"round {number}/{args.rounds}: {side} done, load 1m "
                f"{machine['load_average_1m_before']} -> {machine['load_average_1m_after']}"
            )
    print("load average at end:   {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    for journal, title in BACKENDS:
        print_backend(journal, title, reports)
    return 0


if __name__ == "__main__":
    sys.exit(main())
