"""Holding N long turns: each process's idle CPU and memory, and a coordinator kill -9.

    python -m bench scale [--sizes 1000,5000,10000,20000] [--windows 3]
        [--window-seconds 10] [--kill-size 10000] [--skip-kill] [--json PATH] [--keep]

For each size N, a fresh local deployment (``turnwire.deployment.
LocalDeployment``: one coordinator on a SQLite journal, two runners with the
metered executor and N writable slots each, every process its own) is given N
turns that sleep far longer than the run (``--hold-seconds``), submitted 64 at
a time. Once every one is RUNNING and ``--settle`` seconds have passed, it
measures ``--windows`` windows of ``--window-seconds`` during which nothing
happens, and prints per process: CPU as a share of one core (utime + stime
from /proc, median over the windows), RSS, and RSS per held turn (the growth
of all three processes' RSS since before the first submit, divided by N).
The last column, ``CPU / N vs the first size``, is 1.0 when idle CPU grows
linearly in N and below 1 when it grows slower.

Then, unless ``--skip-kill``: ``--kill-size`` turns of ``--kill-hold``
seconds, all RUNNING; the coordinator is killed with SIGKILL and started
again on the same journal and port. It prints the time from the new process's
start to its first answer (a GetOperation of a held turn answered), waits
until every turn is terminal, and judges the run with the invariant oracle
(``turnwire check``): duplicates (an executor started twice) and lost turns.

It prints figures and never judges speed: exit 0 unless something broke (a
process did not start, a wait ran out) or the oracle found a violation (1).
Loopback only; every process it starts is stopped by its PID before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.e2e_processes import tree_cpu_seconds
from turnwire.client import AsyncTurnwireClient, TurnwireError
from turnwire.deployment import LocalDeployment
from turnwire.harness import check_run

SUBMIT_CONCURRENCY = 64
RPC_TIMEOUT = 30.0
ALL_RUNNING_TIMEOUT = 600.0  # the largest size's submission and first attempts
FIRST_ANSWER_TIMEOUT = 60.0
POLL = 0.01  # the first-answer probe's pause between calls
MODEL = "builtin/metered"


@dataclass(frozen=True)
class Idle:
    """One size: what each process spent while N turns were held and nothing happened."""

    turns: int
    cpu_share: Mapping[str, float]  # process -> share of one core (median of the windows)
    windows: Sequence[Mapping[str, float]]
    rss_mb: Mapping[str, float]
    rss_kb_per_turn: float
    submit_seconds: float


@dataclass(frozen=True)
class Kill:
    turns: int
    first_answer_seconds: float
    all_terminal_seconds: float
    terminal: Mapping[str, int]
    duplicates: int
    lost: int
    violations: int


@dataclass
class Report:
    sizes: list[Idle] = field(default_factory=list)
    kill: Kill | None = None


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def rss_mb(pid: int | None) -> float:
    """Resident set size of one process in MB (0.0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def roots(deployment: LocalDeployment) -> dict[str, int | None]:
    return {process.name: process.pid for process in deployment.processes()}


def deployment_for(data_dir: Path, turns: int) -> LocalDeployment:
    # Each runner could hold every turn: routing spreads them, nothing waits.
    return LocalDeployment(
        data_dir, runner_count=2, executor="metered", writable_slots=turns, read_only_slots=1
    )


async def submit_all(deployment: LocalDeployment, turns: int, hold_seconds: float) -> list[str]:
    """Submit ``turns`` metered turns that sleep ``hold_seconds``; their ids."""
    ids: list[str] = []
    parameters = {"sleep_ms": str(int(hold_seconds * 1000))}
    async with AsyncTurnwireClient(deployment.address, deployment.token, timeout=RPC_TIMEOUT) as c:
        gate = asyncio.Semaphore(SUBMIT_CONCURRENCY)

        async def one(index: int) -> None:
            async with gate:
                submitted = await c.submit(
                    items=[f"held turn {index}"], model=MODEL, parameters=parameters
                )
            ids.append(submitted.operation.operation_id)
            if len(ids) % 1000 == 0:
                progress(f"  submitted {len(ids)}/{turns}")

        await asyncio.gather(*(one(index) for index in range(turns)))
    return ids


def states(deployment: LocalDeployment) -> dict[str, int]:
    """Operations per state, read from the journal file (read-only, as the oracle does)."""
    journal = deployment.data_dir / "journal.db"
    with sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=10) as db:
        rows = db.execute("SELECT state, count(*) FROM operations GROUP BY state").fetchall()
    return {str(state): int(count) for state, count in rows}


def wait_until(deployment: LocalDeployment, what: str, done: str, turns: int, limit: float) -> None:
    """Wait (bounded) until ``turns`` operations are in state ``done``
    (``"terminal"``: any state but the open ones)."""
    deadline = time.monotonic() + limit
    shown = -1
    while True:
        counts = states(deployment)
        if done == "terminal":
            open_states = ("QUEUED", "DISPATCHING", "DISPATCH_UNKNOWN", "RUNNING", "CANCELLING")
            reached = sum(n for state, n in counts.items() if state not in open_states)
        else:
            reached = counts.get(done, 0)
        if reached >= turns:
            return
        if reached // 1000 != shown:
            shown = reached // 1000
            progress(f"  {what}: {reached}/{turns}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {reached}/{turns} after {limit:.0f}s ({counts})")
        time.sleep(0.5)


def measure_windows(
    deployment: LocalDeployment, windows: int, seconds: float
) -> list[dict[str, float]]:
    measured: list[dict[str, float]] = []
    pids = roots(deployment)
    for _ in range(windows):
        before, started = tree_cpu_seconds(pids), time.monotonic()
        time.sleep(seconds)
        after, elapsed = tree_cpu_seconds(pids), time.monotonic() - started
        window = {name: (after[name] - before[name]) / elapsed for name in pids}
        progress("  idle window: " + ", ".join(f"{n} {v:.1%}" for n, v in window.items()))
        measured.append(window)
    return measured


def measure_size(area: Path, turns: int, args: argparse.Namespace) -> Idle:
    progress(f"holding {turns} turns")
    deployment = deployment_for(area / f"hold-{turns}", turns)
    deployment.start()
    try:
        empty = sum(rss_mb(pid) for pid in roots(deployment).values())
        started = time.monotonic()
        asyncio.run(submit_all(deployment, turns, args.hold_seconds))
        submit_seconds = time.monotonic() - started
        wait_until(deployment, "running", "RUNNING", turns, ALL_RUNNING_TIMEOUT)
        time.sleep(args.settle)
        windows = measure_windows(deployment, args.windows, args.window_seconds)
        rss = {name: rss_mb(pid) for name, pid in roots(deployment).items()}
        grown_kb = (sum(rss.values()) - empty) * 1024
        # Printed now too: a later size or the kill may not finish.
        progress(
            f"  {turns} held: RSS "
            + ", ".join(f"{name} {mb:.0f} MB" for name, mb in rss.items())
            + f"; {grown_kb / turns:.1f} KB per held turn"
        )
        return Idle(
            turns=turns,
            cpu_share={n: statistics.median(w[n] for w in windows) for n in windows[0]},
            windows=windows,
            rss_mb=rss,
            rss_kb_per_turn=grown_kb / turns,
            submit_seconds=submit_seconds,
        )
    finally:
        deployment.stop()


async def first_answer(deployment: LocalDeployment, operation_id: str) -> float:
    """When (time.monotonic) a GetOperation of ``operation_id`` was first answered."""
    deadline = time.monotonic() + FIRST_ANSWER_TIMEOUT
    while True:
        try:
            async with AsyncTurnwireClient(
                deployment.address, deployment.token, timeout=1.0
            ) as client:
                await client.get(operation_id)
            return time.monotonic()
        except TurnwireError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(POLL)


def measure_kill(area: Path, turns: int, args: argparse.Namespace) -> Kill:
    progress(f"coordinator kill -9 with {turns} turns in flight")
    deployment = deployment_for(area / f"kill-{turns}", turns)
    deployment.start()
    try:
        ids = asyncio.run(submit_all(deployment, turns, args.kill_hold))
        wait_until(deployment, "running", "RUNNING", turns, ALL_RUNNING_TIMEOUT)
        # SIGKILL, then the same command on the same port and journal; the
        # clock runs from the kill (the restart is immediate, as a supervisor's).
        killed, killed_at = time.monotonic(), datetime.now(UTC)
        deployment.restart_coordinator(hard=True, timeout=FIRST_ANSWER_TIMEOUT)
        healthy = time.monotonic() - killed
        answered = asyncio.run(first_answer(deployment, ids[0])) - killed
        progress(
            f"  killed at {killed_at:%H:%M:%S.%f} UTC; healthy {healthy:.2f}s and first "
            f"answer {answered:.2f}s after the kill"
        )
        wait_until(deployment, "terminal", "terminal", turns, args.kill_hold + 600)
        ended = time.monotonic() - killed
        deployment.stop()
        stores = [slot.store for slot in deployment.runners]
        verdict = check_run(deployment.journal, stores, deployment.ledger)
        for violation in verdict.violations[:10]:
            progress(f"  VIOLATION {violation}")
        figures = verdict.figures
        return Kill(
            turns=turns,
            first_answer_seconds=answered,
            all_terminal_seconds=ended,
            terminal=dict(figures.by_terminal_state),
            duplicates=figures.duplicates,
            lost=figures.lost,
            violations=len(verdict.violations),
        )
    finally:
        deployment.stop()


def render(report: Report) -> str:
    lines = ["Holding turns: idle CPU (share of one core, median of the windows) and RSS", ""]
    header = (
        f"{'turns':>7} | {'coordinator':>11} | {'runner-1':>8} | {'runner-2':>8} | "
        f"{'RSS MB (c / r1 / r2)':>21} | {'KB per turn':>11} | {'CPU/N vs first':>14}"
    )
    lines += [header, "-" * len(header)]
    first = report.sizes[0] if report.sizes else None
    for size in report.sizes:
        cpu = size.cpu_share
        total = sum(cpu.values())
        growth = "1.00"
        if first is not None and size is not first and sum(first.cpu_share.values()) > 0:
            per_turn_first = sum(first.cpu_share.values()) / first.turns
            growth = f"{total / size.turns / per_turn_first:.2f}"
        rss = " / ".join(f"{size.rss_mb.get(n, 0.0):.0f}" for n in PROCESSES)
        lines.append(
            f"{size.turns:>7} | {cpu.get('coordinator', 0.0):>11.1%} | "
            f"{cpu.get('runner-1', 0.0):>8.1%} | {cpu.get('runner-2', 0.0):>8.1%} | "
            f"{rss:>21} | {size.rss_kb_per_turn:>11.1f} | {growth:>14}"
        )
    if report.kill is not None:
        k = report.kill
        states_text = ", ".join(f"{state} {n}" for state, n in k.terminal.items())
        lines += [
            "",
            f"coordinator kill -9 with {k.turns} turns in flight:",
            f"  first answer after the kill: {k.first_answer_seconds:.2f} s",
            f"  every turn terminal after:   {k.all_terminal_seconds:.1f} s ({states_text})",
            f"  duplicates {k.duplicates}, lost {k.lost}, oracle violations {k.violations}",
        ]
    return "\n".join(lines)


PROCESSES = ("coordinator", "runner-1", "runner-2")


def sizes_of(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",") if part.strip()]
    if not sizes or any(size < 1 for size in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be positive integers, got {text!r}")
    return sizes


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench scale", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--sizes",
        type=sizes_of,
        default=[1000, 5000, 10000, 20000],
        help="turns held at once, one fresh deployment each (default 1000,5000,10000,20000)",
    )
    parser.add_argument("--windows", type=int, default=3, help="idle windows per size (default 3)")
    parser.add_argument(
        "--window-seconds", type=float, default=10.0, help="length of a window (default 10)"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=15.0,
        help="seconds between the last turn RUNNING and the first window (default 15)",
    )
    parser.add_argument(
        "--hold-seconds",
        type=float,
        default=3600.0,
        help="how long each held turn sleeps (default 3600: longer than the run)",
    )
    parser.add_argument(
        "--kill-size", type=int, default=10000, help="turns in flight at the kill (default 10000)"
    )
    parser.add_argument(
        "--kill-hold",
        type=float,
        default=90.0,
        help="how long the kill's turns sleep; they must outlast the submission (default 90)",
    )
    parser.add_argument("--skip-kill", action="store_true", help="no coordinator kill -9")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, stores)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    area = Path(tempfile.mkdtemp(prefix="turnwire-scale-"))
    report = Report()
    try:
        for turns in args.sizes:
            report.sizes.append(measure_size(area, turns, args))
        if not args.skip_kill:
            report.kill = measure_kill(area, args.kill_size, args)
    finally:
        if args.keep:
            progress(f"kept {area}")
        else:
            shutil.rmtree(area, ignore_errors=True)
    print(render(report))
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(report), indent=2) + "\n")
    broken = report.kill is not None and (
        report.kill.violations or report.kill.duplicates or report.kill.lost
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
