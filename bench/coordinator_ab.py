"""Two coordinator configurations, side by side, in alternating rounds.

    .venv/bin/python -m bench coordinator_ab --b-arg=--queue-before-first-attempt
        [--a-arg=FLAG ...] [--turns N] [--rounds R] [--quick] [--json]

Starts two systems on SQLite, each its own runner process, coordinator
process and journal file: A with the coordinator's defaults (plus any
``--a-arg``), B with the ``--b-arg`` flags. Then ``R`` rounds at 1 and at 16
turns in flight, A and B taking turns to go first, each a loop of no-op
turns through the public API as bench/e2e.py runs them (one SubmitAndWatch
call, the echo executor). A round measures its ops/s, p50 latency, the CPU
per turn of the client and both processes (until the system is quiet after
the loop), and the journal's durable transactions per turn.

A single bench/e2e.py run on this machine moves 20-30% with the machine
(more in a busy window); two configurations measured in separate runs
cannot be told apart by less than that. Alternating rounds on two live
systems spread the drift over both, and the medians over rounds say which
way a change goes.

It prints figures and never judges speed: exit 0 unless something broke.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Sequence

from bench.ab_rounds import IN_FLIGHT, Figures, alternating, medians
from bench.baseline import measure
from bench.e2e import RPC_TIMEOUT, Stack, one_turn, settle
from bench.e2e_processes import (
    Counters,
    Plan,
    Scratch,
    scratch,
    start_coordinator,
    start_runners,
    tree_cpu_seconds,
    wait_quiet,
)
from turnwire.client import AsyncTurnwireClient

WAYS = ("A", "B")
FIGURES = ("ops/s", "p50 ms", "CPU ms/turn", "transactions/turn")
DEFAULT_TURNS = 300
DEFAULT_ROUNDS = 5
QUICK_TURNS = 20
QUICK_ROUNDS = 2
SLOTS = 32


def progress(line: str) -> None:
    print(f"[ab] {line}", file=sys.stderr, flush=True)


async def start_way(
    area: Scratch, way: str, extra: Sequence[str], clients: contextlib.AsyncExitStack
) -> Stack:
    """One system: a runner, a coordinator with ``extra`` flags, and a client here
    (closed with ``clients``; the processes end with ``area``, by PID)."""
    plan = Plan(turns=0, runners=1, slots=SLOTS)
    runners = start_runners(area, way, plan)
    url = f"sqlite:///{area.root / f'{way}-journal.db'}"
    coordinator = start_coordinator(area, way, url, runners, extra)
    client = await clients.enter_async_context(
        AsyncTurnwireClient(coordinator.address, coordinator.token, timeout=RPC_TIMEOUT)
    )
    flags = " ".join(extra) or "(defaults)"
    progress(f"{way}: coordinator pid {coordinator.pid}, runner pid {runners[0].pid}: {flags}")
    return Stack(way, runners, coordinator, client)


async def one_round(stack: Stack, in_flight: int, turns: int) -> list[float]:
    """[ops/s, p50 ms, stack CPU ms per turn, durable transactions per turn]."""
    count = turns if in_flight == 1 else 2 * turns

    async def turn(index: int) -> None:
        del index
        state = await one_turn(stack.client, "one-call")
        if state.value != "SUCCEEDED":
            raise RuntimeError(f"a no-op turn ended {state.value}")

    await measure("warm-up", turn, max(5, count // 10), in_flight)
    before = await settle(stack)
    processes = stack.processes()
    cpu_before = tree_cpu_seconds(processes)
    client_before = time.process_time()
    figures = await measure(f"{stack.journal} x{in_flight}", turn, count, in_flight)
    client = time.process_time() - client_before
    after = await settle(stack)
    cpu_after = tree_cpu_seconds(processes)
    servers = sum(cpu_after[name] - cpu_before[name] for name in processes)
    delta: Counters = after.minus(before)
    return [
        figures.ops_per_second,
        figures.p50_ms,
        (client + servers) * 1000 / count,
        delta.journal_transactions / count,
    ]


def table(found: Figures) -> dict[str, dict[str, dict[str, float]]]:
    """{"x1": {figure: {"A": median, "B": median, "B/A": ratio}}, "x16": ...}."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for in_flight in IN_FLIGHT:
        a = medians(found[(in_flight, "A")])
        b = medians(found[(in_flight, "B")])
        out[f"x{in_flight}"] = {
            name: {"A": x, "B": y, "B/A": y / x if x else 0.0}
            for name, x, y in zip(FIGURES, a, b, strict=True)
        }
    return out


def lines(result: dict[str, dict[str, dict[str, float]]], rounds: int) -> list[str]:
    out = [f"medians over {rounds} alternating rounds (A and B each a live system on SQLite)"]
    for label, figures in result.items():
        out.append(f"  {label}")
        for name, row in figures.items():
            out.append(
                f"    {name:<18} A {row['A']:9.2f}   B {row['B']:9.2f}   B/A {row['B/A']:.3f}"
            )
    return out


async def run(a_args: Sequence[str], b_args: Sequence[str], turns: int, rounds: int) -> Figures:
    with scratch(keep=False) as area:
        await wait_quiet(progress)
        async with contextlib.AsyncExitStack() as clients:
            by_way = {
                "A": await start_way(area, "A", a_args, clients),
                "B": await start_way(area, "B", b_args, clients),
            }

            async def round_of(way: str, in_flight: int) -> list[float]:
                return await one_round(by_way[way], in_flight, turns)

            return await alternating(WAYS, rounds, round_of, "ab")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog="example: python -m bench coordinator_ab --b-arg=--queue-before-first-attempt",
    )
    parser.add_argument(
        "--a-arg", action="append", default=[], metavar="FLAG", help="a serve flag for A"
    )
    parser.add_argument(
        "--b-arg", action="append", default=[], metavar="FLAG", help="a serve flag for B"
    )
    parser.add_argument(
        "--turns",
        type=int,
        default=None,
        help=f"turns per round one at a time; 16 in flight runs twice as many "
        f"(default {DEFAULT_TURNS}, {QUICK_TURNS} with --quick)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=f"rounds per in-flight count (default {DEFAULT_ROUNDS}, {QUICK_ROUNDS} with --quick)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--json", action="store_true", help="print the medians as JSON only")
    args = parser.parse_args(argv)
    turns = args.turns if args.turns is not None else (QUICK_TURNS if args.quick else DEFAULT_TURNS)
    rounds = (
        args.rounds if args.rounds is not None else (QUICK_ROUNDS if args.quick else DEFAULT_ROUNDS)
    )
    if turns < 1 or rounds < 1:
        parser.error("--turns and --rounds must be >= 1")
    if not args.a_arg and not args.b_arg:
        parser.error("give A or B a flag (--b-arg=FLAG): two identical systems compare nothing")
    found = asyncio.run(run(args.a_arg, args.b_arg, turns, rounds))
    result = table(found)
    if args.json:
        print(
            json.dumps(
                {
                    "turns": turns,
                    "rounds": rounds,
                    "a_args": args.a_arg,
                    "b_args": args.b_arg,
                    "medians": result,
                },
                indent=2,
            )
        )
    else:
        print(f"A: {' '.join(args.a_arg) or '(defaults)'}")
        print(f"B: {' '.join(args.b_arg) or '(defaults)'}")
        print("\n".join(lines(result, rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
