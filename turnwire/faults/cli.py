"""``python -m turnwire.faults``: run a fault proxy, or change a running one's rules.

    python -m turnwire.faults proxy --upstream 127.0.0.1:50051 [--listen 127.0.0.1:0]
        [--control 127.0.0.1:0] [--rule RULE ...] [--seed N]
        [--address-file F] [--control-address-file F]
    python -m turnwire.faults rules add    --control ADDR RULE | --json JSON
    python -m turnwire.faults rules list   --control ADDR [--json]
    python -m turnwire.faults rules remove --control ADDR RULE_ID
    python -m turnwire.faults rules clear  --control ADDR
    python -m turnwire.faults stats        --control ADDR [--json]

A RULE is ``ACTION [key=value ...]``, e.g. ``drop-response method=Dispatch nth=1``
(see turnwire/faults/rules.py for every action and key).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import grpc

from turnwire.faults.control import FaultControlClient
from turnwire.faults.loopback import NonLoopbackAddressError
from turnwire.faults.proxy import FaultProxy, start_proxy
from turnwire.faults.rules import (
    FaultStats,
    Rule,
    RuleError,
    RuleStatus,
    parse_rule,
    rule_from_json,
)
from turnwire.observability.logs import add_log_format_flag, configure_logging
from turnwire.serving import AddressInUseError, announce
from turnwire.transport_security import SecurityConfigError, tls_from_flags

RULE_HELP = (
    "ACTION [key=value ...]; actions: drop-request, drop-response, delay-request, "
    "delay-response, reset, blackhole; keys: method, op, nth, count, p, for, ms, at, messages. "
    'Example: "drop-response method=Dispatch nth=1"'
)


RULE_SYNTAX = """\
rule syntax: ACTION [key=value ...]   (the first rule that fires on a call decides)
  drop-request                 never forwarded; caller gets UNAVAILABLE
  drop-response                forwarded, upstream replies; caller gets UNAVAILABLE
  delay-request ms=N           wait N ms, then forward (past the deadline: never forwarded)
  delay-response ms=N          forward, then hold the reply N ms
  reset [at=request|response]  UNAVAILABLE "connection reset", before or after forwarding
  blackhole [for=D]            hold, never forward, until the caller's deadline or D
selector keys:
  method=Dispatch | pkg.Service/Method   op=OPERATION_ID (request field 1)
  nth=N (only the N-th selected call)    count=K (fire at most K times)
  p=0.25 (seeded by --seed)              for=500ms|2s|1m (rule lifetime)
  messages=N (streams: responses passed before drop-response / reset at=response)
examples:
  python -m turnwire.faults proxy --upstream 127.0.0.1:50051 --control 127.0.0.1:0 \\
      --rule "drop-response method=Dispatch nth=1"
  python -m turnwire.faults rules add --control 127.0.0.1:PORT "blackhole for=2s"
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m turnwire.faults",
        description="gRPC fault injection for Turnwire: a forwarding proxy that drops, "
        "delays, resets or blackholes chosen calls, and the commands that change its rules.",
        epilog=RULE_SYNTAX,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    proxy = commands.add_parser(
        "proxy",
        help="run a fault proxy in front of one upstream",
        description="Forward every gRPC call to --upstream, injecting the faults the rules "
        "name. Prints 'listening on HOST:PORT' (and 'control on HOST:PORT'); logs one line "
        "per injected fault to stderr; stops on SIGTERM/SIGINT.",
        epilog=RULE_SYNTAX,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    proxy.add_argument("--upstream", required=True, help="HOST:PORT to forward to (loopback)")
    proxy.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (default 127.0.0.1:0)")
    proxy.add_argument("--control", help="HOST:PORT for the control API (omit: none)")
    proxy.add_argument("--rule", action="append", default=[], help=RULE_HELP + " (repeatable)")
    proxy.add_argument("--seed", type=int, default=0, help="seed for probabilistic rules")
    proxy.add_argument("--address-file", help="write the bound proxy address here")
    proxy.add_argument("--control-address-file", help="write the bound control address here")
    proxy.add_argument("--tls-cert", help="mutual TLS on both hops: this proxy's certificate")
    proxy.add_argument("--tls-key", help="its private key (mode 600)")
    proxy.add_argument("--tls-ca", help="the CA both the callers' and the upstream's chain to")
    add_log_format_flag(proxy, "TURNWIRE_LOG_FORMAT")

    rules = commands.add_parser("rules", help="list or change a running proxy's rules")
    actions = rules.add_subparsers(dest="rules_command", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="append a rule")
    add.add_argument("rule", nargs="?", help=RULE_HELP)
    add.add_argument("--json", dest="rule_json", help="the rule as a JSON object instead")
    listing = actions.add_parser("list", help="every rule with its hit counts")
    listing.add_argument("--json", action="store_true", help="print JSON")
    remove = actions.add_parser("remove", help="remove one rule by id")
    remove.add_argument("rule_id", type=int)
    actions.add_parser("clear", help="remove every rule")
    stats = commands.add_parser("stats", help="calls per method and faults injected")
    stats.add_argument("--json", action="store_true", help="print JSON")
    for sub in (add, listing, remove, actions.choices["clear"], stats):
        sub.add_argument("--control", required=True, help="the proxy's control HOST:PORT")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "proxy":
            return asyncio.run(_run_proxy(args))
        return asyncio.run(_run_control(args))
    except (RuleError, NonLoopbackAddressError, AddressInUseError, SecurityConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except grpc.aio.AioRpcError as exc:
        target = getattr(args, "control", "?")
        print(
            f"error: control service at {target}: {exc.code().name}: {exc.details()}",
            file=sys.stderr,
        )
        return 1


async def _run_proxy(args: argparse.Namespace) -> int:
    configure_logging("INFO", args.log_format)
    rules = [parse_rule(text) for text in args.rule]  # refuse a bad rule before listening
    tls = tls_from_flags(args.tls_cert, args.tls_key, args.tls_ca)
    proxy = await start_proxy(
        args.upstream, listen=args.listen, seed=args.seed, control_listen=args.control, tls=tls
    )
    try:
        for rule in rules:
            print(f"rule {proxy.add_rule(rule)}: {rule.to_text()}", flush=True)
        print(f"forwarding to {proxy.upstream}", flush=True)
        if proxy.control_address is not None:
            _announce_control(proxy.control_address, args.control_address_file)
        announce(proxy.address, args.address_file)
        await _until_signalled()
    finally:
        await _stop(proxy)
    return 0


def _announce_control(address: str, address_file: str | None) -> None:
    print(f"control on {address}", flush=True)
    if address_file:
        path = Path(address_file)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(address + "\n")
        tmp.replace(path)


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


async def _stop(proxy: FaultProxy) -> None:
    print(f"stopping; {format_stats(proxy.stats())}", flush=True)
    await proxy.stop(grace=0.5)


async def _run_control(args: argparse.Namespace) -> int:
    async with FaultControlClient(args.control) as client:
        if args.command == "stats":
            stats = await client.stats()
            print(json.dumps(asdict(stats), sort_keys=True) if args.json else format_stats(stats))
        elif args.rules_command == "add":
            added = await client.add(_rule_argument(args))
            print(format_status(added))
        elif args.rules_command == "list":
            listed = await client.list()
            if args.json:
                print(json.dumps([_status_json(s) for s in listed], sort_keys=True))
            for status in [] if args.json else listed:
                print(format_status(status))
            if not listed and not args.json:
                print("no rules")
        elif args.rules_command == "remove":
            removed = await client.remove(args.rule_id)
            print(f"rule {args.rule_id} removed" if removed else f"no rule {args.rule_id}")
            return 0 if removed else 1
        else:
            print(f"removed {await client.clear()} rules")
    return 0


def _rule_argument(args: argparse.Namespace) -> Rule:
    if (args.rule is None) == (args.rule_json is None):
        raise RuleError("give exactly one of RULE or --json JSON")
    if args.rule is not None:
        return parse_rule(args.rule)
    try:
        data = json.loads(args.rule_json)
    except json.JSONDecodeError as exc:
        raise RuleError(f"--json is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RuleError("--json must be a JSON object")
    return rule_from_json(data)


def format_status(status: RuleStatus) -> str:
    expired = " (expired)" if status.expired else ""
    return (
        f"rule {status.rule_id}: {status.rule.to_text()}  "
        f"hits={status.hits} selected={status.selected}{expired}"
    )


def _status_json(status: RuleStatus) -> dict[str, object]:
    return {
        "rule_id": status.rule_id,
        "rule": status.rule.to_json(),
        "text": status.rule.to_text(),
        "hits": status.hits,
        "selected": status.selected,
        "expired": status.expired,
    }


def format_stats(stats: FaultStats) -> str:
    calls = ", ".join(f"{m}={n}" for m, n in sorted(stats.calls_by_method.items())) or "none"
    return (
        f"calls: {calls}; dropped_requests={stats.dropped_requests} "
        f"dropped_responses={stats.dropped_responses} delayed={stats.delayed} "
        f"reset={stats.reset} blackholed={stats.blackholed}"
    )
