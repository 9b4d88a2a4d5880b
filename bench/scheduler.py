"""The scheduler under load (issue 9): capacity, fairness, results first.

    python -m bench scheduler [--scenario all|capacity|flood|lag] [--quick] [--json]

A real runner (metered executor, gRPC on 127.0.0.1) and the real dispatcher
on a SQLite journal in a temporary directory, in this process; turns are
accepted the way SubmitTurn accepts them (journal.submit, then the
dispatcher's ``accepted``). Three scenarios, each printing its figures:

capacity  ``--turns`` (200) turns of ``--sleep-ms`` (5000) from ``--principals``
          (4) principals at once, on one runner with ``--slots`` (4) writable
          slots: once without faults, once with ``--loss`` (10%) request loss
          and the same response loss on every coordinator->runner call. Prints
          final states, capacity refusals, attempts counted, duplicate starts,
          wall vs ideal (ceil(turns/slots) x sleep) and slot utilisation while
          turns were waiting (the runner's own in-use count, sampled).
flood     three quiet principals submit ``--quiet-rate`` (1/s) turns each of
          ``--flood-sleep-ms`` (300), for ``--seconds`` (20); measured alone,
          then with a fourth principal flooding at ``--flood-rate`` (40/s,
          above what the slots can run). Prints the quiet principals'
          submit-to-terminal p50/p99 both times and their ratio (target <= 2).
lag       a ``--backlog`` (10,000) turn backlog submitted by one principal as
          fast as 16 submitters can, while the runner settles short turns:
          the result-recording lag (journal terminal time minus the runner's
          settle time) of every turn settled meanwhile: p50/p99/max (target
          p99 < 1 s).

``--quick`` shrinks every scenario for a smoke run. Every task and server it
starts is stopped before it exits; loopback only; loops are bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import math
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from coordinator_svc.core.decision import CAPACITY_REFUSALS, counted_attempts, refusal_reason
from coordinator_svc.core.model import OperationRecord, OpState
from coordinator_svc.dispatcher import Dispatcher
from turnwire.faults.interceptor import fault_interceptors
from turnwire.faults.rules import RuleSet, parse_rule
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.secure_channels import runner_aio_channel
from turnwire.testing.dispatcher_rig import Rig, new_operation, sqlite_journal


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


class Stack:
    """One runner and one dispatcher on a fresh SQLite journal."""

    def __init__(self, tmp: Path, slots: int, loss: float = 0.0, seed: int = 7) -> None:
        self.slots = slots
        self.rig = Rig(tmp, sqlite_journal(tmp / "journal.db"))
        if loss > 0:
            rules = RuleSet(seed=seed)
            rules.add(parse_rule(f"drop-request probability={loss}"))
            rules.add(parse_rule(f"drop-response probability={loss}"))
            self.rig.interceptors = fault_interceptors(rules)
        self.dispatcher: Dispatcher | None = None

    async def start(self) -> Dispatcher:
        await self.rig.start_runner(slots=self.slots)
        dispatcher = self.rig.make_dispatcher()
        await dispatcher.start()
        for _ in range(400):  # bounded: 20 s, until GetRunnerInfo was read
            if dispatcher.room.scheduler.known("r1"):
                break
            await asyncio.sleep(0.05)
        self.dispatcher = dispatcher
        return dispatcher

    async def submit(self, principal: str, sleep_ms: int) -> str:
        assert self.dispatcher is not None
        record, event = new_operation({"sleep_ms": str(sleep_ms)}, principal=principal)
        stored, _ = await self.rig.journal.submit(record, event)
        self.dispatcher.accepted(stored)
        return stored.operation_id

    async def runner_in_use(self) -> int:
        address = self.rig.runners["r1"].address
        async with runner_aio_channel(self.rig.credentials, address) as channel:
            stub = runner_pb2_grpc.RunnerServiceStub(channel)
            info = await stub.GetRunnerInfo(runner_pb2.GetRunnerInfoRequest(), timeout=2.0)
        return sum(p.in_use for p in info.pools if p.kind == 1)  # TURN_KIND_WRITABLE

    async def finish(self, ops: Sequence[str], within: float) -> list[OperationRecord]:
        deadline = time.monotonic() + within
        done: list[OperationRecord] = []
        for op in ops:
            left = max(0.1, deadline - time.monotonic())
            try:
                done.append(await self.rig.terminal(op, within=left))
            except AssertionError:
                record = await self.rig.journal.get(op)
                assert record is not None
                done.append(record)
        return done

    async def close(self) -> None:
        await self.rig.close()


# --- capacity ----------------------------------------------------------------------


async def capacity(args: argparse.Namespace, loss: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="turnwire-sched-") as tmp:
        stack = Stack(Path(tmp), args.slots, loss)
        try:
            dispatcher = await stack.start()
            started = time.monotonic()
            principals = [f"p{n}" for n in range(args.principals)]
            ops = [
                await stack.submit(principals[n % len(principals)], args.sleep_ms)
                for n in range(args.turns)
            ]
            ideal = math.ceil(args.turns / args.slots) * args.sleep_ms / 1000
            samples: list[float] = []
            sampler = asyncio.create_task(_sample(stack, dispatcher, samples))
            done = await stack.finish(ops, within=60.0 + 3 * ideal)
            wall = time.monotonic() - started
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            refusals = counted = 0
            for op in ops:
                attempts = await stack.rig.journal.attempts(op)
                refusals += sum(refusal_reason(a) in CAPACITY_REFUSALS for a in attempts)
                counted += counted_attempts(tuple(attempts))
            starts = stack.rig.starts()
            states = collections.Counter(r.state.value for r in done)
            return {
                "loss": loss,
                "turns": args.turns,
                "principals": args.principals,
                "slots": args.slots,
                "states": dict(states),
                "timed_out": states.get(OpState.TIMED_OUT.value, 0),
                "lost_not_terminal": sum(not r.state.terminal for r in done),
                "duplicates": sum(1 for op in ops if starts[op] > 1),
                "capacity_refusals": refusals,
                "attempts_counted": counted,
                "wall_seconds": round(wall, 1),
                "ideal_seconds": ideal,
                "utilisation_while_waiting": round(statistics.fmean(samples), 3)
                if samples
                else None,
            }
        finally:
            await stack.close()


async def _sample(stack: Stack, dispatcher: Dispatcher, samples: list[float]) -> None:
    """The runner's writable slots in use / size, every 100 ms while turns wait."""
    for _ in range(100_000):  # bounded; cancelled when the turns are done
        await asyncio.sleep(0.1)
        if dispatcher.room.scheduler.waiting() == 0:
            continue
        try:
            samples.append(await stack.runner_in_use() / stack.slots)
        except grpc.aio.AioRpcError:
            continue  # a lost sample is not a figure


# --- flood -------------------------------------------------------------------------


async def flood(args: argparse.Namespace, flooding: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="turnwire-sched-") as tmp:
        stack = Stack(Path(tmp), args.slots)
        try:
            await stack.start()
            quiet: list[str] = []
            flooded: list[str] = []
            end = time.monotonic() + args.seconds

            async def submitter(principal: str, rate: float, into: list[str]) -> None:
                rng = random.Random(principal)
                next_at = time.monotonic() + rng.random() / rate
                while next_at < end:
                    await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                    into.append(await stack.submit(principal, args.flood_sleep_ms))
                    next_at += 1 / rate

            tasks = [submitter(f"quiet{n}", args.quiet_rate, quiet) for n in range(3)]
            if flooding:
                tasks.append(submitter("flood", args.flood_rate, flooded))
            await asyncio.gather(*tasks)
            done = await stack.finish(quiet, within=60.0)
            latencies = [
                (r.finished_at - r.created_at).total_seconds()
                for r in done
                if r.finished_at is not None
            ]
            return {
                "flooding": flooding,
                "quiet_turns": len(quiet),
                "quiet_succeeded": sum(r.state is OpState.SUCCEEDED for r in done),
                "flood_turns_submitted": len(flooded),
                "flood_backlog_at_end": stack.dispatcher.room.scheduler.waiting()
                if stack.dispatcher
                else 0,
                "quiet_p50_s": round(percentile(latencies, 0.5), 3),
                "quiet_p99_s": round(percentile(latencies, 0.99), 3),
            }
        finally:
            await stack.close()


# --- result-recording lag ------------------------------------------------------------


async def lag(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="turnwire-sched-") as tmp:
        stack = Stack(Path(tmp), args.slots)
        try:
            dispatcher = await stack.start()
            ops: list[str] = []
            started = time.monotonic()

            async def submitter(count: int) -> None:
                for _ in range(count):
                    ops.append(await stack.submit("flood", args.lag_sleep_ms))

            share = math.ceil(args.backlog / 16)
            await asyncio.gather(*(submitter(share) for _ in range(16)))
            submitted = time.monotonic() - started
            progress(f"{len(ops)} turns submitted in {submitted:.1f}s; measuring for 10 s more")
            await asyncio.sleep(10.0)
            backlog = dispatcher.room.scheduler.waiting()
            lags = await _lags(stack, Path(tmp) / "r1.db")
            return {
                "backlog_submitted": len(ops),
                "submit_seconds": round(submitted, 1),
                "still_waiting_at_end": backlog,
                "settled_turns_measured": len(lags),
                "lag_p50_s": round(percentile(lags, 0.5), 4),
                "lag_p99_s": round(percentile(lags, 0.99), 4),
                "lag_max_s": round(max(lags), 4) if lags else None,
            }
        finally:
            await stack.close()


async def _lags(stack: Stack, runner_db: Path) -> list[float]:
    """Journal terminal time minus the runner's settle time, per settled turn."""
    with sqlite3.connect(f"file:{runner_db}?mode=ro", uri=True) as db:
        settled = dict(
            db.execute(
                "SELECT operation_id, settled_at FROM runner_operations "
                "WHERE settled_at IS NOT NULL"
            ).fetchall()
        )
    lags = []
    for op, settled_at in settled.items():
        record = await stack.rig.journal.get(op)
        if record is None:
            continue
        if record.finished_at is None:
            lags.append(time.time() - settled_at)  # settled, not yet recorded: still lagging
        else:
            lags.append(record.finished_at.timestamp() - settled_at)
    return lags


# --- main ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--scenario", choices=["all", "capacity", "flood", "lag"], default="all")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--principals", type=int, default=4)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--sleep-ms", type=int, default=5000)
    parser.add_argument("--loss", type=float, default=0.10)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--quiet-rate", type=float, default=1.0)
    parser.add_argument("--flood-rate", type=float, default=40.0)
    parser.add_argument("--flood-sleep-ms", type=int, default=300)
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--lag-sleep-ms", type=int, default=20)
    return parser


def quick(args: argparse.Namespace) -> None:
    args.turns, args.sleep_ms, args.seconds = 12, 200, 3.0
    args.backlog, args.flood_rate = 300, 20.0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    if args.scenario in ("all", "capacity"):
        progress(f"capacity: {args.turns} x {args.sleep_ms} ms, {args.slots} slots, no faults")
        figures["capacity"] = await capacity(args, 0.0)
        progress(f"capacity: the same with {args.loss:.0%} request and response loss")
        figures["capacity_with_loss"] = await capacity(args, args.loss)
    if args.scenario in ("all", "flood"):
        progress(f"flood: quiet principals alone for {args.seconds:g} s")
        alone = await flood(args, flooding=False)
        progress(f"flood: the same beside a principal flooding at {args.flood_rate:g}/s")
        beside = await flood(args, flooding=True)
        ratio = beside["quiet_p99_s"] / alone["quiet_p99_s"] if alone["quiet_p99_s"] else None
        figures["flood"] = {
            "alone": alone,
            "beside_flood": beside,
            "quiet_p99_ratio": round(ratio, 2) if ratio else None,
        }
    if args.scenario in ("all", "lag"):
        progress(f"lag: a {args.backlog}-turn backlog while short turns settle")
        figures["result_lag"] = await lag(args)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Shutdown noise (drives cut off as the journal closes) is not a figure.
    logging.basicConfig(level=logging.ERROR)
    if args.quick:
        quick(args)
    if min(args.turns, args.principals, args.slots, args.backlog) < 1 or not 0 <= args.loss < 1:
        parser.error("counts must be at least 1 and --loss within [0, 1)")
    figures = asyncio.run(run(args))
    if args.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name}: {json.dumps(value, indent=2)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
