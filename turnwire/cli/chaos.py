"""``turnwire chaos``: seeded chaos on a local deployment, judged by the oracle."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from turnwire.chaos import (
    CHAOS_COORDINATOR_ARGS,
    ChaosPlan,
    ChaosTally,
    run_chaos,
    unknown_never_executed,
)
from turnwire.deployment import LocalDeployment
from turnwire.harness import Status, render
from turnwire.harness.outcomes import stale_refusals
from turnwire.launcher import LaunchError

SUMMARY = (
    "launch a local deployment, run seeded chaos (faults in cycles, restarts, steady load) "
    "for a given time, heal, and print the invariant oracle's verdict"
)
EXAMPLES = """examples:
  turnwire chaos --seconds 60              # one minute, seed 0
  turnwire chaos --seconds 600 --seed 42   # ten minutes; the same seed replays the same schedule
  turnwire chaos --journal-url postgresql+psycopg://postgres@127.0.0.1:5432/turnwire"""
EPILOG = """exit status: 0 the invariants held and the run exercised replays/reconciles/
ambiguity, 1 at least one violation (each printed with its operation's full history),
3 the run proved nothing (no violation, nothing hard exercised), 2 usage error,
4 a service failed to start, 130 Ctrl-C"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seconds",
        type=float,
        default=60.0,
        help="chaos time (default 60): the schedule has seconds/cycle fault cycles, so "
        "the same seed always replays the same schedule; restarts add wall time",
    )
    parser.add_argument("--seed", type=int, default=0, help="the schedule's seed (default 0)")
    parser.add_argument("--cycle", type=float, default=3.0, help="seconds per fault cycle")
    parser.add_argument("--rate", type=float, default=10.0, help="turns per second")
    parser.add_argument("--runners", type=int, default=2, help="runners (default 2)")
    parser.add_argument("--data-dir", type=Path, help="default: a new temporary directory")
    parser.add_argument("--journal-url", help="default: SQLite in the data directory")
    parser.add_argument(
        "--settle-timeout",
        type=float,
        default=120.0,
        help="how long quiescence may take after the heal (default 120)",
    )
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.add_argument(
        "--plaintext",
        action="store_true",
        help="no TLS (loopback; runners demand a shared secret). Default: mutual TLS on every "
        "hop, as a deployment runs",
    )


def _progress(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _figures(tally: ChaosTally) -> str:
    verdict = tally.verdict
    assert verdict is not None
    f = verdict.figures
    rows = [
        ("operations", f.operations),
        *((f"  {state}", n) for state, n in sorted(f.by_terminal_state.items())),
        ("executions (ledger)", f.executions),
        ("duplicates", f.duplicates),
        ("lost", f.lost),
        ("replays", f.replays),
        ("reconciled without resend", f.reconciled_without_resend),
        ("ambiguous (TIMED_OUT, UNKNOWN)", f.ambiguous),
        ("UNKNOWN, never executed (ledger)", unknown_never_executed(verdict)),
        (
            "  of them INCARNATION_CHANGED",
            unknown_never_executed(verdict, "INCARNATION_CHANGED"),
        ),
        ("Dispatches refused stale, re-sent", stale_refusals(verdict.run.histories.values())),
        ("cancels sent", tally.cancels),
        ("submits retried", tally.submit_retries),
        *((f"restarts: {name}", n) for name, n in sorted(tally.restarts.items())),
        ("violations", len(verdict.violations)),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"  {name:<{width}}  {value:>7}" for name, value in rows)


def run(args: argparse.Namespace) -> int:
    if args.seconds <= 0 or args.cycle <= 0 or args.rate <= 0 or args.runners < 1:
        print(
            "turnwire chaos: --seconds, --cycle, --rate must be > 0 and --runners >= 1",
            file=sys.stderr,
        )
        return 2
    plan = ChaosPlan(
        seconds=args.seconds,
        seed=args.seed,
        cycle=args.cycle,
        rate=args.rate,
        runners=args.runners,
        settle_timeout=args.settle_timeout,
    )
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="turnwire-chaos-"))
    _progress(f"seed {plan.seed}; {plan.cycles} cycles of {plan.cycle}s; data in {data_dir}")
    deployment = LocalDeployment(
        data_dir,
        runner_count=plan.runners,
        with_proxies=True,
        journal_url=args.journal_url,
        coordinator_args=CHAOS_COORDINATOR_ARGS,
        proxy_seed=plan.seed,
        tls=not args.plaintext,
    )
    try:
        deployment.start()
        tally = asyncio.run(run_chaos(deployment, plan, _progress))
    except LaunchError as exc:
        print(f"turnwire chaos: {exc}", file=sys.stderr)
        return 4
    except KeyboardInterrupt:
        return 130
    finally:
        deployment.stop()
    verdict = tally.verdict
    assert verdict is not None
    if args.json:
        from turnwire.harness import verdict_json

        print(json.dumps(verdict_json(verdict), default=str))
    else:
        if verdict.violations:
            print(render(verdict))
        print(_figures(tally))
        print(f"verdict: {verdict.status.value} (seed {plan.seed})")
    return {Status.PASS: 0, Status.FAIL: 1, Status.VACUOUS: 3}[verdict.status]
