"""Deterministic simulation of the Turnwire protocol, for as long as asked.

    python -m tests.simulation.explore --seconds 60 [--seed-start N] [--steps K] [--jobs J]
    python -m tests.simulation.explore --seed S [--steps K]   # replay one seed, trace printed

Runs seeded schedules (tests/simulation) against the pure cores of both
services until the time is up, then prints schedules run, schedules/s,
steps/s and every violation with its seed. A violation's seed replays
exactly with ``--seed``; ``--shrink`` also prints the shortest failing step
list found. ``--duplicate-requests`` lets the network deliver a request twice
(the protocol assumes it never does: see test_regressions), ``--stale-status-guard``
applies the proposed shell fix for the stale status answer, ``--broken NAME``
runs a deliberately broken policy from tests/simulation/broken_policies.
``--queue-before-first-attempt`` stores every turn QUEUED alone before its first
attempt (the engine's default writes a turn granted at once with its attempt).

The simulated runners prune their stores by §9's rules, as eagerly as the rules
allow (tests/simulation/sim_retention.py), so schedules meet pruned rows and
keys; ``--no-retention`` keeps every row, as runs before issue 13 did (a seed
found then replays with it: pruning changes what a seed's schedule meets).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections import Counter

from tests.simulation.broken_policies import BROKEN
from tests.simulation.budget import HARD_CASES, RARE_CASES, BudgetResult, run_budget
from tests.simulation.shrink import shrink
from tests.simulation.sim_retention import SimRetention
from tests.simulation.simulator import SimConfig, run_seed


def _config(args: argparse.Namespace, trace: bool) -> SimConfig:
    return SimConfig(
        steps=args.steps,
        trace=trace,
        duplicate_requests=args.duplicate_requests,
        stale_status_guard=args.stale_status_guard,
        attempt_with_acceptance=not args.queue_before_first_attempt,
        retention=None if args.no_retention else SimRetention(),
    )


def _worker(job: tuple[argparse.Namespace, int, int, float]) -> BudgetResult:
    args, first, stride, deadline = job
    seeds = range(first, sys.maxsize, stride)
    policy = BROKEN[args.broken] if args.broken else None
    return run_budget(
        seeds,
        _config(args, trace=False),
        policy,
        keep_going=lambda: time.monotonic() < deadline,
    )


def run_for(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.seconds
    jobs = [(args, args.seed_start + n, args.jobs, deadline) for n in range(args.jobs)]
    started = time.perf_counter()
    if args.jobs == 1:
        parts = [_worker(jobs[0])]
    else:
        with multiprocessing.Pool(args.jobs) as pool:
            parts = pool.map(_worker, jobs)
    total = BudgetResult(seconds=time.perf_counter() - started)
    for part in parts:
        total.schedules += part.schedules
        total.steps += part.steps
        total.coverage.update(part.coverage)
        total.violations += part.violations
    pruning = "off" if args.no_retention else "on"
    print(
        f"{args.jobs} process(es), {args.steps} steps per schedule, retention {pruning}: "
        f"{total.figures()}"
    )
    print("hard cases exercised:")
    for name, key in {**HARD_CASES, **RARE_CASES}.items():
        print(f"  {name}: {total.coverage[key]}")
    if not args.no_retention:
        print("retention (PROTOCOL.md §9):")
        for key in ("retention:row_pruned", "retention:key_dropped", "refused:OPERATION_PRUNED"):
            print(f"  {key}: {total.coverage[key]}")
    kinds = Counter(v.split("]")[0] + "]" for _, v in total.violations)
    for seed, violation in sorted(total.violations)[: args.show]:
        print(f"VIOLATION seed {seed}: {violation}")
    if kinds:
        print(f"violations by invariant: {dict(kinds)}")
        first = min(total.violations)[0]
        print(
            f"replay the first with: python -m tests.simulation.explore --seed {first} "
            f"--steps {args.steps}{' --shrink' if not args.shrink else ''}"
        )
    return 1 if total.violations else 0


def replay_seed(args: argparse.Namespace) -> int:
    policy = BROKEN[args.broken] if args.broken else None
    result = run_seed(args.seed, _config(args, trace=True), policy)
    print(f"setup: {result.setup}")
    print("\n".join(result.trace))
    print(result.report().splitlines()[0])
    if result.violation:
        print("--- history ---")
        print("\n".join(result.history))
        if args.shrink:
            labels, final = shrink(
                result.setup, result.labels, result.violation, _config(args, trace=True), policy
            )
            print(f"--- shrunk from {len(result.labels)} to {len(labels)} steps ---")
            print(labels)
            print(final.report())
    return 1 if result.violation else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed-start", type=int, default=0)
    parser.add_argument("--steps", type=int, default=70)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--seed", type=int, help="replay this one seed with its trace")
    parser.add_argument("--shrink", action="store_true", help="shrink a failing --seed")
    parser.add_argument("--show", type=int, default=20, help="violations to list")
    parser.add_argument("--duplicate-requests", action="store_true")
    parser.add_argument("--stale-status-guard", action="store_true")
    parser.add_argument(
        "--queue-before-first-attempt",
        action="store_true",
        help="store every turn QUEUED alone first, as the coordinator's flag of that name "
        "does (default: a turn granted at once is stored with its first attempt, issue 10)",
    )
    parser.add_argument(
        "--no-retention",
        action="store_true",
        help="runners keep every row and key (default: they prune as eagerly as §9 allows)",
    )
    parser.add_argument("--broken", choices=sorted(BROKEN))
    args = parser.parse_args(argv)
    if args.seed is not None:
        return replay_seed(args)
    return run_for(args)


if __name__ == "__main__":
    sys.exit(main())
