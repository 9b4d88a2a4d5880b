"""Streamed output relayed to clients (PROTOCOL.md §12), every part its own process.

    .venv/bin/python -m bench streaming [--turns 100] [--rate 20] [--seconds 10] [--json]

``--turns`` turns at once, each emitting ``--rate`` chunks per second for
``--seconds`` (``bench/streaming_executor.py``: a python executor on a
timer), on one runner process (``python -m runner_svc serve``, a slot per
turn) behind the real coordinator (``python -m bench.counting_coordinator`` on a
SQLite journal); the client (this process, one asyncio SDK client) runs
every turn with ``submit_and_stream`` (SubmitAndWatch with stream_output).

Prints: chunks expected, delivered, lost (named by a gap, or missing), and
reordered or repeated (must be 0 without crashes: S2), p50/p99/max emit ->
client latency (emitted_at is the runner's stamp; one machine, one clock),
and CPU per chunk of each process (from /proc: the runner, the coordinator,
this client) over the measured run. It prints figures and never judges
speed: exit 0 unless something broke (a process did not start, a turn did
not succeed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass

from bench import REPO_ROOT
from bench.e2e_processes import (
    BenchBroke,
    Scratch,
    scratch,
    start_coordinator,
    tree_cpu_seconds,
)
from turnwire.client import (
    Operation,
    OperationState,
    OutputChunk,
    OutputGap,
    RetryPolicy,
)
from turnwire.client.aio import AsyncTurnwireClient
from turnwire.launcher import ManagedProcess
from turnwire.testing.processes import start_runner_process

EXECUTOR = "python:bench.streaming_executor:tick"


@dataclass
class TurnFigures:
    delivered: int = 0
    lost: int = 0
    disorder: int = 0  # a chunk not at cursor + 1 with no gap before it
    latencies: list[float] | None = None
    ok: bool = False


@dataclass(frozen=True)
class Report:
    turns: int
    rate: float
    seconds: float
    chunks_expected: int
    delivered: int
    lost: int
    reordered: int
    failed_turns: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    wall_seconds: float
    cpu_us_per_chunk: dict[str, float]
    date: str


def start_runner(area: Scratch, slots: int) -> ManagedProcess:
    (area.root / "runner").mkdir()
    process = start_runner_process(
        area.root / "runner" / "store.db",
        area.root / "logs",
        executor=EXECUTOR,
        flags=(
            "--writable-slots", str(slots),
            "--read-only-slots", "1",
            "--plaintext", "--coordinator-secret-file", str(area.runner_secret_file),
            "--log-level", "WARNING",
        ),
        # The runner imports the executor from this tree's bench package.
        env={"PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
        timeout=60.0,
    )  # fmt: skip
    area.processes.append(process)
    process.wait_healthy(60.0, area.open_runner_channel)
    return process


async def one_turn(client: AsyncTurnwireClient, chunks: int, rate: float) -> TurnFigures:
    figures = TurnFigures(latencies=[])
    assert figures.latencies is not None
    cursor = 0
    parameters = {"chunks": str(chunks), "rate": str(rate)}
    async for item in client.submit_and_stream(
        items=["go"], model="bench/tick", parameters=parameters, timeout=120
    ):
        if isinstance(item, OutputChunk):
            now = time.time()
            if item.offset != cursor + 1:
                figures.disorder += 1
            cursor = item.offset
            figures.delivered += 1
            if item.emitted_at is not None:
                figures.latencies.append(now - item.emitted_at.timestamp())
        elif isinstance(item, OutputGap):
            end = item.next_offset - 1 if item.next_offset else chunks
            figures.lost += end - item.after_offset
            cursor = max(cursor, end)
        elif isinstance(item, Operation):
            figures.ok = item.state is OperationState.SUCCEEDED
    figures.lost += max(0, chunks - cursor)  # never said: counted lost anyway
    return figures


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(args: argparse.Namespace, area: Scratch) -> Report:
    runner = start_runner(area, args.turns)
    journal = f"sqlite:///{area.root / 'journal.db'}"
    # One stream per turn, all from one principal: room for every one of them.
    room = (
        "--max-streams-per-principal",
        str(args.turns + 8),
        "--max-streams",
        str(args.turns + 64),
    )
    coordinator = start_coordinator(area, "stream", journal, [runner], room)
    chunks = max(1, round(args.rate * args.seconds))
    policy = RetryPolicy(attempts=5, initial_backoff=0.1, max_backoff=1.0)
    async with AsyncTurnwireClient(
        coordinator.address, coordinator.token, retries=policy
    ) as client:
        # Warm-up: one short turn (imports, channels, the first journal writes).
        await one_turn(client, 3, 50.0)
        roots = {"runner": runner.pid, "coordinator": coordinator.pid, "client": os.getpid()}
        before = tree_cpu_seconds(roots)
        started = time.monotonic()
        results = await asyncio.gather(
            *(one_turn(client, chunks, args.rate) for _ in range(args.turns))
        )
        wall = time.monotonic() - started
        after = tree_cpu_seconds(roots)
    delivered = sum(r.delivered for r in results)
    latencies = [x for r in results for x in (r.latencies or [])]
    per_chunk = {
        name: round((after[name] - before[name]) / max(1, delivered) * 1e6, 1) for name in roots
    }
    return Report(
        turns=args.turns,
        rate=args.rate,
        seconds=args.seconds,
        chunks_expected=chunks * args.turns,
        delivered=delivered,
        lost=sum(r.lost for r in results),
        reordered=sum(r.disorder for r in results),
        failed_turns=sum(not r.ok for r in results),
        p50_ms=round(_percentile(latencies, 0.50) * 1000, 1),
        p99_ms=round(_percentile(latencies, 0.99) * 1000, 1),
        max_ms=round(max(latencies, default=float("nan")) * 1000, 1),
        wall_seconds=round(wall, 2),
        cpu_us_per_chunk=per_chunk,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )


def render(report: Report) -> str:
    cpu = ", ".join(f"{name} {us:g} µs" for name, us in report.cpu_us_per_chunk.items())
    return "\n".join(
        [
            f"streaming: {report.turns} turns at once, {report.rate:g} chunks/s each for "
            f"{report.seconds:g} s ({report.date}, {os.cpu_count()} cores)",
            f"  chunks: expected {report.chunks_expected}, delivered {report.delivered}, "
            f"lost {report.lost}, reordered {report.reordered}; failed turns {report.failed_turns}",
            f"  emit -> client latency: p50 {report.p50_ms} ms, p99 {report.p99_ms} ms, "
            f"max {report.max_ms} ms",
            f"  CPU per chunk: {cpu} (wall {report.wall_seconds} s)",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--rate", type=float, default=20.0, help="chunks per second per turn")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each turn emits")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    try:
        with scratch(args.keep) as area:
            report = asyncio.run(measure(args, area))
    except BenchBroke as error:
        print(f"bench broke: {error}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(report), sort_keys=True) if args.json else render(report))
    return 1 if report.failed_turns else 0


if __name__ == "__main__":
    sys.exit(main())
