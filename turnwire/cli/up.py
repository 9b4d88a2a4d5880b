"""``turnwire up``: run a local deployment (and optionally the demo) until Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from turnwire.deployment import LocalDeployment
from turnwire.launcher import LaunchError

SUMMARY = (
    "start a coordinator and runners on this machine (SQLite, each its own process) "
    "until Ctrl-C; --demo runs the demo of the promise"
)
EXAMPLES = """examples:
  turnwire up                      # coordinator + 2 runners until Ctrl-C (mutual TLS)
  turnwire up --plaintext          # the same without TLS, on loopback
  turnwire up --demo               # the demo: turns under transport loss, then a table
  turnwire up --demo --turns 200 --seed 3 --data-dir ./demo-data"""
EPILOG = """exit status: 0 ok (demo: the promise held), 1 the demo found a duplicate, a lost
turn or a broken invariant, 2 usage error, 4 a service failed to start, 130 Ctrl-C"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turnwire up",
        description=SUMMARY,
        epilog=EXAMPLES + "\n\n" + EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(parser)
    return parser


def configure(parser: argparse.ArgumentParser, *, demo_flag: bool = True) -> None:
    """The options of `turnwire up` (the turnwire CLI extension hook)."""
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="where journal, stores, ledger and "
        "logs go (default: a new temporary directory, printed at start)",
    )
    parser.add_argument("--runners", type=int, default=2, help="how many runners (default 2)")
    parser.add_argument(
        "--executor",
        default="metered",
        help="runner executor spec (default metered: counts every start)",
    )
    if demo_flag:
        parser.add_argument(
            "--demo",
            action="store_true",
            help="submit a batch under injected transport loss, print the table, exit",
        )
    parser.add_argument("--turns", type=int, default=60, help="demo: how many turns (default 60)")
    parser.add_argument("--seed", type=int, default=7, help="demo: seed for the fault schedule")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="demo: leave the services running until Ctrl-C afterwards",
    )
    parser.add_argument(
        "--plaintext",
        action="store_true",
        help="no TLS (loopback only; runners then demand a shared secret). Default: TLS for "
        "the public API and mutual TLS to every runner, certificates in DATA/certs",
    )


def _wait_for_ctrl_c(deployment: LocalDeployment) -> None:
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop:
        dead = [p.name for p in deployment.processes() if not p.alive()]
        if dead:
            print(
                f"stopped unexpectedly: {', '.join(dead)} (logs in {deployment.data_dir / 'logs'})",
                file=sys.stderr,
            )
            return
        time.sleep(0.5)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(args)


def run(args: argparse.Namespace) -> int:
    if args.runners < 1 or args.turns < 1:
        print("error: --runners and --turns must be at least 1", file=sys.stderr)
        return 2
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="turnwire-"))
    print(f"data directory: {data_dir}", flush=True)
    deployment = LocalDeployment(
        data_dir,
        runner_count=args.runners,
        executor=args.executor,
        with_proxies=args.demo,
        tls=not args.plaintext,
        metrics=True,  # issue 13: every service's /metrics on a loopback port, printed below
    )
    try:
        deployment.start()
        for process in deployment.processes():
            print(f"  {process.name:<12} pid {process.pid:<7} {process.address}", flush=True)
        scheme = "https" if deployment.ca_file is not None else "http"
        for name in ["coordinator", *(slot.name for slot in deployment.runners)]:
            address = deployment.metrics_address(name)
            print(f"  {name:<12} metrics {scheme}://{address}/metrics", flush=True)
        print(f"token for principal 'demo': {deployment.token}", flush=True)
        if deployment.ca_file is not None:
            print(f"TLS: the public API and every runner hop; CA {deployment.ca_file}", flush=True)
        ca = f"TURNWIRE_CA_FILE={deployment.ca_file} " if deployment.ca_file else ""
        print(
            f"try: TURNWIRE_ADDRESS={deployment.address} TURNWIRE_TOKEN={deployment.token} "
            f"{ca}turnwire submit --input hello --wait",
            flush=True,
        )
        if not args.demo:
            print("running; Ctrl-C stops everything", flush=True)
            _wait_for_ctrl_c(deployment)
            return 0
        from turnwire import demo

        plan = demo.DemoPlan(turns=args.turns, seed=args.seed)
        report = asyncio.run(demo.run_demo(deployment, plan))
        print(demo.render(report), flush=True)
        code = demo.verdict(report)
        if args.keep:
            _wait_for_ctrl_c(deployment)
        return code
    except LaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 4
    except KeyboardInterrupt:
        return 130
    finally:
        print("stopping", flush=True)
        deployment.stop()


if __name__ == "__main__":
    raise SystemExit(main())
