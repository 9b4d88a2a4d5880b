"""The one table of ``python -m bench e2e --peers`` (bench/peers.py): rows, text, JSON.

Peer rows are the median over the peer harness's rounds; each peer's "x echo"
is the median of its per-round ratios to the same round's b_grpc.py echo at
the same C (as run_all.py computes it). Turnwire rows come from one
bench/e2e.py run, against bench/baseline.py's echo in that run. The table is
grouped by C, the calls in flight, so each Turnwire row stands beside the
peers measured at the same C; a C one side did not measure says so (the peer
harness runs C=1 and C=16 only and takes no concurrency argument, so
Turnwire's C=64 rows have no peers beside them).
"""

from __future__ import annotations

import statistics
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.e2e_report import Report, SystemResult, runs_lines, turns_text

PEER_SYSTEMS = (
    "grpc",
    "sqlite",
    "dbos-sqlite",
    "dbos-sqlite-wal",
    "dbos-pg",
    "celery",
    "procrastinate",
)
PEER_LABELS = {
    "grpc": "gRPC echo, b_grpc.py (64 B) [baseline]",
    "sqlite": "SQLite txn INSERT+UPDATE, WAL+FULL [baseline]",
    "dbos-sqlite": "DBOS, SQLite as shipped (rollback, FULL)",
    "dbos-sqlite-wal": "DBOS, SQLite WAL+FULL",
    "dbos-pg": "DBOS, PostgreSQL",
    "celery": "Celery + Redis (AOF always, acks_late)",
    "procrastinate": "Procrastinate, PostgreSQL",
}
TURNWIRE_LABELS = {
    "echo": "gRPC echo, bench/baseline.py (256 B) [baseline]",
    "sqlite": "Turnwire, SQLite journal (WAL+FULL)",
    "postgresql": "Turnwire, PostgreSQL journal",
}
MISSING = "\N{EN DASH}"  # where a figure is not known


@dataclass(frozen=True)
class PeerRun:
    """One run_all.py run: where it wrote, its per-run records, when and how long."""

    out: Path
    results: list[dict[str, Any]]
    failures: list[str]
    exit_code: int
    started: float
    wall: float
    command: list[str]


# --- rows and text ----------------------------------------------------------


@dataclass(frozen=True)
class Row:
    harness: str  # "peers" or "turnwire"
    system: str
    label: str
    in_flight: int
    ops_per_second: float | None
    x_echo: float | None
    p50_ms: float | None
    p99_ms: float | None
    stack_cpu_ms_per_op: float | None
    commits_per_op: float | None = None
    runner_rpcs_per_op: float | None = None
    baseline: bool = False

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items()}


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def mode_in_flight(mode: str) -> int:
    """run_all.py's mode ("seq", "c16", any "cN") as calls in flight."""
    return 1 if mode == "seq" else int(mode.lstrip("c"))


def peer_rows(results: Sequence[dict[str, Any]]) -> list[Row]:
    echo = {(r["round"], r["mode"]): r["ops_per_s"] for r in results if r["system"] == "grpc"}
    rows = []
    known = [s for s in PEER_SYSTEMS if any(r["system"] == s for r in results)]
    others = sorted({r["system"] for r in results} - set(PEER_SYSTEMS))
    modes = sorted({r["mode"] for r in results}, key=mode_in_flight)
    for system in [*known, *others]:
        for mode in modes:
            runs = [r for r in results if r["system"] == system and r["mode"] == mode]
            if not runs:
                continue
            ratios = [
                r["ops_per_s"] / echo[(r["round"], mode)]
                for r in runs
                if echo.get((r["round"], mode)) and r.get("ops_per_s") is not None
            ]
            rows.append(
                Row(
                    "peers",
                    system,
                    PEER_LABELS.get(system, system),
                    mode_in_flight(mode),
                    _median([r.get("ops_per_s") for r in runs]),
                    None if system == "grpc" else _median(ratios),
                    _median([r.get("p50_ms") for r in runs]),
                    _median([r.get("p99_ms") for r in runs]),
                    _median([r.get("stack_cpu_ms_per_op") for r in runs]),
                    baseline=system in ("grpc", "sqlite"),
                )
            )
    return rows


def turnwire_rows(report: Report) -> list[Row]:
    rows = [
        Row(
            "turnwire",
            "echo",
            TURNWIRE_LABELS["echo"],
            base.in_flight,
            base.figures.ops_per_second,
            None,
            base.figures.p50_ms,
            base.figures.p99_ms,
            base.cpu_ms_per_op_stack,
            baseline=True,
        )
        for base in report.baseline
    ]
    for system in report.systems:
        rows.append(turnwire_row(system, report))
    return rows


def turnwire_row(system: SystemResult, report: Report) -> Row:
    ops_ratio, _ = system.ratios(report.baseline_for(system.in_flight))
    return Row(
        "turnwire",
        system.journal,
        TURNWIRE_LABELS.get(system.journal, f"Turnwire, {system.journal}"),
        system.in_flight,
        system.figures.ops_per_second,
        ops_ratio,
        system.figures.p50_ms,
        system.figures.p99_ms,
        system.cpu_ms_per_op_stack,
        system.journal_commits_per_op,
        system.total_rpcs_per_op,
    )


def _cell(value: float | None, digits: int) -> str:
    return MISSING if value is None else f"{value:,.{digits}f}"


HEADER = (
    f"{'system':<48} {'C':>2} {'ops/s':>8} {'x echo':>7} {'p50 ms':>8} {'p99 ms':>9} "
    f"{'p99/p50':>7} {'stack CPU ms/op':>15} {'commits/op':>10} {'runner RPCs/op':>14}"
)


def row_line(row: Row) -> str:
    x_echo = "(base)" if row.system in ("grpc", "echo") else _cell(row.x_echo, 3)
    tail = row.p99_ms / row.p50_ms if row.p50_ms and row.p99_ms is not None else None
    return (
        f"{row.label:<48} {row.in_flight:>2} {_cell(row.ops_per_second, 1):>8} {x_echo:>7} "
        f"{_cell(row.p50_ms, 2):>8} {_cell(row.p99_ms, 2):>9} {_cell(tail, 2):>7} "
        f"{_cell(row.stack_cpu_ms_per_op, 3):>15} {_cell(row.commits_per_op, 2):>10} "
        f"{_cell(row.runner_rpcs_per_op, 2):>14}"
    )


def level_lines(peers: Sequence[Row], turnwire: Sequence[Row]) -> list[str]:
    """The rows grouped by C: at each, the peers' rows, then Turnwire's; a C only one
    side measured says so in place of the other side's rows."""
    lines: list[str] = []
    measured = ", ".join(str(n) for n in sorted({row.in_flight for row in peers}))
    for in_flight in sorted({row.in_flight for row in [*peers, *turnwire]}):
        if lines:
            lines.append("")
        ours = [row for row in turnwire if row.in_flight == in_flight]
        theirs = [row for row in peers if row.in_flight == in_flight]
        if not theirs:
            lines.append(
                f"(no peers at C={in_flight}: run_all.py measured C={measured or 'nothing'}; "
                "it takes no concurrency argument)"
            )
        lines += [row_line(row) for row in theirs]
        if not ours:
            lines.append(f"(no Turnwire rows at C={in_flight}: e2e's --in-flight left it out)")
        lines += [row_line(row) for row in ours]
    return lines


def _clock(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(seconds))


def print_table(
    peer_run: PeerRun, report: Report, turnwire_started: float, turnwire_wall: float
) -> None:
    rounds = sorted({r["round"] for r in peer_run.results})
    print(
        f"Peers and Turnwire, one window on this machine ({report.cpus} CPUs): peers first "
        f"{_clock(peer_run.started)} ({peer_run.wall:.0f} s), then Turnwire "
        f"{_clock(turnwire_started)} ({turnwire_wall:.0f} s); total "
        f"{peer_run.wall + turnwire_wall:.0f} s"
    )
    print(f"peers: ../shared/bench-peers/run_all.py, median of {len(rounds)} round(s)")
    runs = (
        f"the median of {len(report.runs)} runs (run {report.chosen_run})"
        if len(report.runs) > 1
        else "one run"
    )
    turns = turns_text(report, "{count} ops at C={n}")
    print(f"Turnwire: bench/e2e.py, {runs} ({turns}), no-op turns")
    print(HEADER)
    print("-" * len(HEADER))
    for line in level_lines(peer_rows(peer_run.results), turnwire_rows(report)):
        print(line)
    print("-" * len(HEADER))
    for note in notes(peer_run, report):
        print(textwrap.fill(note, width=len(HEADER), subsequent_indent="  "))
    for line in runs_lines(report):
        print(line)


def notes(peer_run: PeerRun, report: Report) -> list[str]:
    command = peer_run.command
    quiet = "--noisy" in command and command[command.index("--noisy") + 1] in ("0", "0.0")
    remeasures = (
        " (here without re-measuring noisy ones)" if quiet else " and re-measures noisy ones"
    )
    lines = [
        "x echo: ops/s / the gRPC echo ops/s at the same C, each side against the echo baseline "
        "measured by its own harness in this window: peers against run_all.py's b_grpc.py echo "
        "(64 B, the same round, median of the per-round ratios), Turnwire against "
        "bench/baseline.py's echo (256 B, this run). Neither side uses the other's echo.",
        "stack CPU: the client plus every server process of that row, over the timed window. "
        "Peers: the harness's own accounting (gRPC server; Celery worker + redis-server; "
        "postmaster + backends; Procrastinate worker). Turnwire: client + coordinator + "
        "runners (+ the PostgreSQL server, postmaster + backends); its servers until the "
        "system is quiet after the loop (trailing Releases count).",
        "commits/op: Turnwire's journal commits; runner RPCs/op: coordinator -> runner calls. "
        f"'{MISSING}' where the harness does not count them (peers).",
        f"The peer harness waits for a quiet machine before each run{remeasures}; "
        "Turnwire's bench waits the same way (at most 0.3 cores busy over 1 s, at most "
        "20 s) before the baseline and each journal, and re-measures nothing (1-minute "
        f"load average {report.load_before:.2f} before, {report.load_after:.2f} after).",
    ]
    pg = [
        f"{r['system']} C={1 if r['mode'] == 'seq' else r['mode'][1:]} "
        f"{r['pg_xact_commit_per_op']:.2f}"
        for r in peer_run.results
        if r.get("pg_xact_commit_per_op") is not None and r["round"] == 1
    ]
    if pg:
        lines.append(
            "Peers' PostgreSQL xact commits/op (round 1; pg_stat_database, includes read-only "
            "transactions and pool pings, warm-up included; not the same measure as "
            "Turnwire's journal commits): " + ", ".join(pg)
        )
    if not any(r["system"] == "grpc" for r in peer_run.results):
        lines.append(f"The peers ran without their gRPC echo: their x echo is '{MISSING}'.")
    if report.postgres_skipped is not None:
        lines.append(f"Turnwire on PostgreSQL: skipped ({report.postgres_skipped}).")
    for failure in peer_run.failures:
        lines.append(f"PEER MEASUREMENT FAILED: {failure}")
    if not report.all_succeeded:
        lines.append("SOME TURNWIRE NO-OP TURNS DID NOT SUCCEED: not the happy path")
    lines.append(f"Peer report (RESULTS.md, results.json, run_all.log, logs/): {peer_run.out}")
    return lines


def table_json(
    peer_run: PeerRun, report: Report, turnwire_started: float, turnwire_wall: float
) -> dict[str, Any]:
    return {
        "order": "peers first, then turnwire",
        # By C, as the text: at each, the peers' rows, then Turnwire's.
        "table": [
            r.as_json()
            for r in sorted(
                peer_rows(peer_run.results) + turnwire_rows(report), key=lambda r: r.in_flight
            )
        ],
        "peers": {
            "out": str(peer_run.out),
            "command": peer_run.command,
            "exit_code": peer_run.exit_code,
            "started_unix": round(peer_run.started, 1),
            "wall_s": round(peer_run.wall, 1),
            "failures": peer_run.failures,
            "results": peer_run.results,
        },
        "turnwire": {
            "started_unix": round(turnwire_started, 1),
            "wall_s": round(turnwire_wall, 1),
            **report.as_json(),
        },
    }
