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
from turnwire.vocabulary import DEFAULT_EXECUTOR, split_executor_flag

SUMMARY = (
    "start a coordinator and runners on this machine (SQLite, each its own process) "
    "until Ctrl-C; --demo runs the demo of the promise"
)
EXAMPLES = """examples:
  turnwire up                      # coordinator + 2 runners until Ctrl-C (mutual TLS)
  turnwire up --plaintext          # the same without TLS, on loopback
  turnwire up --port 50051 --runner-port 50061 --metrics-port 9100 --console-listen 127.0.0.1:8080
                                   # fixed ports: coordinator, runners 50061.., metrics 9100..
  turnwire up --demo               # the demo: turns under transport loss, then a table
  turnwire up --demo --turns 200 --seed 3 --data-dir ./demo-data

It prints each process's address, the tokens (principal 'demo'; 'admin' with the
admin scope), the tokens file, the CA and the TURNWIRE_* variables the CLI and
the Python SDK (TurnwireClient.from_env()) read; at exit, what it leaves in the
data directory and how to remove it."""
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
        action="append",
        default=None,
        metavar="[NAME=]SPEC",
        help="an executor every runner serves, repeatable: NAME=SPEC for turns naming NAME, "
        "a bare SPEC as the default (default metered: counts every start); "
        "docs/EXECUTORS.md",
    )
    _port_options(parser)
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


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port 1..65535, got {text!r}")
    return int(text)


def _slots(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return int(text)


def _port_options(parser: argparse.ArgumentParser) -> None:
    """Ports (all on 127.0.0.1; default: free ones, printed), slots and the console."""
    group = parser.add_argument_group("ports, slots and the console (default: free ports)")
    group.add_argument("--port", type=_port, default=0, help="the coordinator's public API")
    group.add_argument(
        "--runner-port",
        type=_port,
        default=0,
        metavar="PORT",
        help="runner-1's port; runner-N listens on PORT + N - 1",
    )
    group.add_argument(
        "--metrics-port",
        type=_port,
        default=0,
        metavar="PORT",
        help="the coordinator's /metrics; runner-N's on PORT + N",
    )
    group.add_argument(
        "--console",
        action="store_true",
        help="also serve the operator's web console on a free port (sign in with the "
        "admin token printed at start)",
    )
    group.add_argument(
        "--console-listen",
        metavar="HOST:PORT",
        help="serve the console on HOST:PORT (loopback; HTTPS unless --plaintext)",
    )
    for kind in ("writable", "read-only"):
        group.add_argument(
            f"--{kind}-slots",
            type=_slots,
            default=8,
            metavar="N",
            help=f"each runner's {kind.upper().replace('-', '_')} slots (default 8)",
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


def _usage_problem(args: argparse.Namespace) -> str | None:
    if args.runners < 1 or args.turns < 1:
        return "--runners and --turns must be at least 1"
    for flag, base, count in (
        ("--runner-port", args.runner_port, args.runners - 1),
        ("--metrics-port", args.metrics_port, args.runners),
    ):
        if base and base + count > 65535:
            return f"{flag} {base} leaves no port for runner-{args.runners}"
    if args.console and args.console_listen:
        return "--console and --console-listen exclude each other"
    return None


def _print_started(deployment: LocalDeployment) -> None:
    """Where everything is, the tokens, and the variables the CLI and the SDK read."""
    for process in deployment.processes():
        print(f"  {process.name:<12} pid {process.pid:<7} {process.address}", flush=True)
    scheme = "https" if deployment.ca_file is not None else "http"
    for name in ["coordinator", *(slot.name for slot in deployment.runners)]:
        address = deployment.metrics_address(name)
        print(f"  {name:<12} metrics {scheme}://{address}/metrics", flush=True)
    if deployment.console_listen:
        print(f"  {'console':<12} {deployment.console_url()}", flush=True)
    print(f"token for principal 'demo': {deployment.token}", flush=True)
    print(f"admin token (principal 'admin', scope admin): {deployment.admin_token}", flush=True)
    print(f"tokens file: {deployment.tokens_file}", flush=True)
    if deployment.ca_file is not None:
        print(f"TLS: the public API and every runner hop; CA {deployment.ca_file}", flush=True)
    ca = f"TURNWIRE_CA_FILE={deployment.ca_file} " if deployment.ca_file else ""
    print(
        f"try: TURNWIRE_ADDRESS={deployment.address} TURNWIRE_TOKEN={deployment.token} "
        f"{ca}turnwire submit --input hello --wait",
        flush=True,
    )


def _print_leftovers(deployment: LocalDeployment) -> None:
    """What stays on disk after the processes are gone, and how to remove it."""
    leftovers = deployment.leftovers()
    if not leftovers:
        return
    print(f"left in {deployment.data_dir}:", flush=True)
    for name, what in leftovers:
        print(f"  {name:<18} {what}", flush=True)
    print(f"remove it all with: rm -rf {deployment.data_dir}", flush=True)


def _executors(flags: list[str]) -> tuple[str, tuple[str, ...]]:
    """The default executor's spec (metered unless a bare one is given) and the named."""
    bare = [flag for flag in flags if split_executor_flag(flag)[0] == DEFAULT_EXECUTOR]
    named = tuple(flag for flag in flags if flag not in bare)
    return (split_executor_flag(bare[-1])[1] if bare else "metered"), named


def run(args: argparse.Namespace) -> int:
    problem = _usage_problem(args)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="turnwire-"))
    print(f"data directory: {data_dir}", flush=True)
    default, named = _executors(args.executor or [])
    deployment = LocalDeployment(
        data_dir,
        runner_count=args.runners,
        executor=default,
        named_executors=named,
        writable_slots=args.writable_slots,
        read_only_slots=args.read_only_slots,
        with_proxies=args.demo,
        tls=not args.plaintext,
        metrics=True,  # every service's /metrics on a loopback port, printed below
        coordinator_port=args.port,
        runner_base_port=args.runner_port,
        metrics_base_port=args.metrics_port,
        console_listen="127.0.0.1:0" if args.console else args.console_listen,
        with_admin_token=True,
    )
    try:
        deployment.start()
        _print_started(deployment)
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
        _print_leftovers(deployment)


if __name__ == "__main__":
    raise SystemExit(main())
