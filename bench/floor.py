"""The floor under bench/e2e.py's ratios: what Turnwire's shape costs before it does any work.

    .venv/bin/python -m bench floor [--ops N] [--quick] [--json]

A turn crosses two gRPC hops (client -> coordinator, a server-streaming
SubmitAndWatch; coordinator -> runner, a unary Dispatch) and, when run one at
a time, waits for four durable commits in a row (the coordinator's
acceptance, which carries the first attempt written ahead (PROTOCOL C1a), and
its terminal commit; the runner's admission, which carries the launch intent
of a turn that starts at once (PROTOCOL R3), and its settlement; five before
issue 27). This script measures, in one run and on this
machine, each sequentially and with 16 in flight:

1. grpc echo: the client -> one server, unary, the denominator e2e.py uses
   (``python -m bench.baseline --serve``, its own process);
2. the relay: the same shape with nothing in it, client -> a middle server
   (a server-streaming call whose one reply waits for) -> a unary Echo to a
   backend server, each server its own process (``baseline.py --serve
   --relay-to``);
3. one durable commit at its cheapest: a raw sqlite3 transaction inserting one
   row (WAL, synchronous=FULL) in a temp dir on the disk the benches use; and
   the CPU of that transaction awaited from an event loop and run on a worker
   thread, as the services make theirs.

It prints the relay as x echo, the sequential floor (the relay's mean
latency plus four commits, as ops/s and x echo) and the sequential CPU floor
(the relay's stack CPU plus four commits' CPU). No Turnwire code runs here, so
no Turnwire figure can beat these; they say how much of a target is left for
the work itself (validation, scheduling, the state machines, the SQL).

It prints figures and never judges speed: exit 0 unless something broke.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from bench.baseline import ECHO_METHOD, RELAY_METHOD, Figures, measure
from bench.e2e_processes import STOP_GRACE, Scratch, scratch, tree_cpu_seconds, wait_quiet
from turnwire.launcher import ManagedProcess, python_module

IN_FLIGHT = (1, 16)
PAYLOAD = b"x" * 256  # e2e.py's echo payload
RPC_TIMEOUT = 10.0
LOOP_TIMEOUT = 120.0
# The durable commits a turn waits for in a row when turns run one at a time:
# the coordinator's acceptance (with the attempt written ahead, C1a) and its
# terminal commit, and the runner's admission, launch-intent and settlement
# transactions.
COMMITS_ON_THE_PATH = 4
# Issue 10's targets, as x echo of the same run.
TARGET_SEQUENTIAL = 0.20
TARGET_CONCURRENT = 0.10
TARGET_CPU_MS = 4.0  # stack CPU per turn
DEFAULT_OPS = 1000
QUICK_OPS = 100


@dataclass(frozen=True)
class Loop:
    """One measured loop and the CPU its processes spent per op (ms)."""

    name: str  # "echo" or "relay"
    in_flight: int
    figures: Figures
    cpu_ms_per_op: float

    @property
    def ops_per_second(self) -> float:
        return self.figures.ops_per_second


@dataclass(frozen=True)
class Floor:
    """What the run found (pure; ``lines`` and ``as_json`` print it)."""

    loops: tuple[Loop, ...]
    commit_ms: float
    # CPU of one such commit made as the services make theirs: awaited from the
    # event loop, run on a worker thread (the hand-off both ways included).
    commit_cpu_ms: float = 0.0

    def loop(self, name: str, in_flight: int) -> Loop:
        return next(x for x in self.loops if x.name == name and x.in_flight == in_flight)

    def x_echo(self, name: str, in_flight: int) -> float:
        echo = self.loop("echo", in_flight).ops_per_second
        return self.loop(name, in_flight).ops_per_second / echo if echo else 0.0

    @property
    def sequential_floor_ms(self) -> float:
        """A turn at one in flight: the relay's mean latency plus the commits in a row."""
        return self.loop("relay", 1).figures.mean_ms + COMMITS_ON_THE_PATH * self.commit_ms

    @property
    def sequential_cpu_floor_ms(self) -> float:
        """CPU of a turn at one in flight: the relay's stack CPU plus the commits'."""
        return self.loop("relay", 1).cpu_ms_per_op + COMMITS_ON_THE_PATH * self.commit_cpu_ms

    @property
    def sequential_floor_ops(self) -> float:
        return 1000.0 / self.sequential_floor_ms if self.sequential_floor_ms else 0.0

    @property
    def sequential_floor_x_echo(self) -> float:
        echo = self.loop("echo", 1).ops_per_second
        return self.sequential_floor_ops / echo if echo else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "loops": [
                {
                    "name": x.name,
                    "in_flight": x.in_flight,
                    "ops_per_second": round(x.ops_per_second, 1),
                    "mean_ms": round(x.figures.mean_ms, 3),
                    "p50_ms": round(x.figures.p50_ms, 3),
                    "cpu_ms_per_op": round(x.cpu_ms_per_op, 3),
                    "x_echo": round(self.x_echo(x.name, x.in_flight), 3),
                }
                for x in self.loops
            ],
            "commit_ms": round(self.commit_ms, 3),
            "commit_cpu_ms_through_a_thread": round(self.commit_cpu_ms, 3),
            "sequential_cpu_floor_ms": round(self.sequential_cpu_floor_ms, 3),
            "commits_on_the_path": COMMITS_ON_THE_PATH,
            "sequential_floor_ms": round(self.sequential_floor_ms, 3),
            "sequential_floor_ops_per_second": round(self.sequential_floor_ops, 1),
            "sequential_floor_x_echo": round(self.sequential_floor_x_echo, 3),
        }

    def lines(self) -> list[str]:
        out = ["Turnwire's shape with no work in it, next to grpc echo, in one run"]
        for x in self.loops:
            out.append(
                f"  {x.name:<6} x{x.in_flight:<3} {x.ops_per_second:9.1f} ops/s   "
                f"mean {x.figures.mean_ms:6.2f} ms   p50 {x.figures.p50_ms:6.2f} ms   "
                f"stack CPU {x.cpu_ms_per_op:5.2f} ms/op   "
                f"{self.x_echo(x.name, x.in_flight):.3f}x echo"
            )
        echo_1 = self.loop("echo", 1).ops_per_second
        echo_16 = self.loop("echo", 16).ops_per_second
        out += [
            f"  one durable commit (raw sqlite3, WAL, synchronous=FULL): {self.commit_ms:.3f} ms",
            f"sequential floor: relay mean + {COMMITS_ON_THE_PATH} commits = "
            f"{self.sequential_floor_ms:.2f} ms a turn = {self.sequential_floor_ops:.1f} ops/s "
            f"= {self.sequential_floor_x_echo:.3f}x echo",
            f"issue 10's sequential target {TARGET_SEQUENTIAL:.2f}x echo = "
            f"{TARGET_SEQUENTIAL * echo_1:.1f} ops/s, a turn in "
            f"{_ms_per_op(TARGET_SEQUENTIAL * echo_1):.2f} ms: "
            f"{_ms_per_op(TARGET_SEQUENTIAL * echo_1) - self.sequential_floor_ms:.2f} ms "
            "left for all of Turnwire's own work",
            f"  its CPU awaited from an event loop, run on a worker thread: "
            f"{self.commit_cpu_ms:.3f} ms",
            f"sequential CPU floor: relay stack CPU + {COMMITS_ON_THE_PATH} such commits = "
            f"{self.sequential_cpu_floor_ms:.2f} ms a turn; issue 10's {TARGET_CPU_MS:.0f} ms "
            f"target leaves {TARGET_CPU_MS - self.sequential_cpu_floor_ms:.2f} ms",
            f"issue 10's 16-in-flight target {TARGET_CONCURRENT:.2f}x echo = "
            f"{TARGET_CONCURRENT * echo_16:.1f} ops/s; the relay alone runs "
            f"{self.x_echo('relay', 16):.3f}x",
        ]
        return out


def _ms_per_op(ops_per_second: float) -> float:
    return 1000.0 / ops_per_second if ops_per_second else float("inf")


def commit_ms(directory: Path, count: int) -> float:
    """Mean wall time of one raw sqlite3 transaction inserting a row (WAL, FULL)."""
    connection = sqlite3.connect(directory / "floor.db", isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("CREATE TABLE turns (id INTEGER PRIMARY KEY, body BLOB)")
        started = time.perf_counter()
        for index in range(count):
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("INSERT INTO turns VALUES (?, ?)", (index, PAYLOAD))
            connection.execute("COMMIT")
        return (time.perf_counter() - started) * 1000 / count
    finally:
        connection.close()


async def commit_cpu_ms(directory: Path, count: int) -> float:
    """Mean CPU (this process) of the same transaction awaited from the running
    event loop and run on a one-thread pool, as the journal and the runner
    store make theirs without blocking their loop: the commit's own CPU plus
    waking the worker and waking the loop again."""
    connection = sqlite3.connect(
        directory / "floor-thread.db", isolation_level=None, check_same_thread=False
    )
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    loop = asyncio.get_running_loop()

    def one(index: int) -> None:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("INSERT INTO turns VALUES (?, ?)", (index, PAYLOAD))
        connection.execute("COMMIT")

    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("CREATE TABLE turns (id INTEGER PRIMARY KEY, body BLOB)")
        for index in range(10):  # the worker thread started, the file warm
            await loop.run_in_executor(pool, one, -1 - index)
        started = time.process_time()
        for index in range(count):
            await loop.run_in_executor(pool, one, index)
        return (time.process_time() - started) * 1000 / count
    finally:
        pool.shutdown(wait=True)
        connection.close()


async def measure_loop(
    name: str, method: Any, servers: dict[str, int | None], in_flight: int, ops: int
) -> Loop:
    streaming = name == "relay"

    async def once(index: int) -> None:
        del index
        if streaming:
            async for _ in method(PAYLOAD, timeout=RPC_TIMEOUT):
                pass
        else:
            await method(PAYLOAD, timeout=RPC_TIMEOUT)

    async with asyncio.timeout(LOOP_TIMEOUT):
        await measure("warm-up", once, max(5, ops // 10), in_flight)
        servers_before = tree_cpu_seconds(servers)
        client_before = time.process_time()
        figures = await measure(f"{name} x{in_flight}", once, ops, in_flight)
        client = time.process_time() - client_before
        servers_after = tree_cpu_seconds(servers)
    spent = client + sum(servers_after[n] - servers_before[n] for n in servers)
    loop = Loop(name, in_flight, figures, spent * 1000 / ops)
    progress(
        f"{name} x{in_flight}: {loop.ops_per_second:.0f} ops/s, "
        f"mean {figures.mean_ms:.2f} ms, stack CPU {loop.cpu_ms_per_op:.2f} ms/op"
    )
    return loop


def start_server(area: Scratch, name: str, *extra: str) -> ManagedProcess:
    argv = python_module("bench.baseline", "--serve", *extra)
    return area.start(name, argv, healthy=False)


async def run(ops: int, keep: bool) -> Floor:
    with scratch(keep) as area:
        await wait_quiet(progress)
        backend = start_server(area, "backend")
        middle = start_server(area, "middle", "--relay-to", backend.address)
        loops: list[Loop] = []
        async with (
            grpc.aio.insecure_channel(backend.address) as to_backend,
            grpc.aio.insecure_channel(middle.address) as to_middle,
        ):
            echo = to_backend.unary_unary(ECHO_METHOD)
            relay = to_middle.unary_stream(RELAY_METHOD)
            for in_flight in IN_FLIGHT:
                loops.append(
                    await measure_loop("echo", echo, {"backend": backend.pid}, in_flight, ops)
                )
                both = {"middle": middle.pid, "backend": backend.pid}
                loops.append(await measure_loop("relay", relay, both, in_flight, ops))
        for process in (middle, backend):
            process.terminate(STOP_GRACE)
        commit = commit_ms(area.root, max(50, ops // 2))
        progress(f"one durable commit: {commit:.3f} ms")
        commit_cpu = await commit_cpu_ms(area.root, max(50, ops // 2))
        progress(f"its CPU through a worker thread: {commit_cpu:.3f} ms")
    return Floor(tuple(loops), commit, commit_cpu)


def progress(line: str) -> None:
    print(f"[floor] {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--ops",
        type=int,
        default=None,
        help=f"calls per measured loop (default {DEFAULT_OPS}, {QUICK_OPS} with --quick)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    args = parser.parse_args(argv)
    ops = args.ops if args.ops is not None else (QUICK_OPS if args.quick else DEFAULT_OPS)
    if ops < 1:
        parser.error("--ops must be >= 1")
    floor = asyncio.run(run(ops, args.keep))
    if args.json:
        print(json.dumps(floor.as_json(), indent=2))
    else:
        print("\n".join(floor.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
