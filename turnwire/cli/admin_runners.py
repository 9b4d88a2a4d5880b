"""``turnwire admin runners``: the runner set (PROTOCOL.md §11) and its drains (§10 V8).

    turnwire admin runners [list]     every member: capacity, health, drains, bound turns
    turnwire admin runners add NAME HOST:PORT [--pool P] [--kinds K] [--reason TEXT]
    turnwire admin runners drain NAME --reason TEXT / undrain NAME
    turnwire admin runners remove NAME --reason TEXT [--force] [--generation N]

``turnwire admin drain`` / ``undrain`` are the same as ``runners drain`` / ``undrain``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from turnwire.cli import admin_render
from turnwire.cli.admin_common import EPILOG, emit, emit_json, formatter, reason_option
from turnwire.cli.exit_codes import ExitCode
from turnwire.cli.options import add_connection_options, add_json_option, non_negative_int
from turnwire.client import AdminClient, NotAllowed, TurnwireError


def configure_runners(parser: argparse.ArgumentParser) -> None:
    """``runners`` alone lists; its verbs change the set (each takes the common options
    after the verb: ``turnwire admin runners add r3 HOST:PORT --json``)."""
    verbs = parser.add_subparsers(dest="runners_verb", metavar="VERB")
    for name, summary, configure_verb, run in RUNNER_VERBS:
        sub = verbs.add_parser(
            name,
            help=summary,
            description=summary,
            epilog=EPILOG,
            formatter_class=formatter,
        )
        configure_verb(sub)
        add_connection_options(sub)
        add_json_option(sub)
        sub.set_defaults(admin_run=run)


def configure_add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runner", metavar="NAME", help="the runner's name (no spaces, = ; ,)")
    # Not dest "address": that is the coordinator's (--address, the connection option).
    parser.add_argument(
        "runner_address", metavar="HOST:PORT", help="where the coordinators dial it"
    )
    parser.add_argument("--pool", default="", help="the pool it serves (default: default)")
    parser.add_argument(
        "--kinds",
        default="",
        metavar="KINDS",
        help="writable, read_only or writable,read_only (default: both)",
    )
    parser.add_argument(
        "--reason", default="", metavar="TEXT", help="why (optional; kept with the record)"
    )


def run_add(client: AdminClient, args: argparse.Namespace) -> int:
    kinds = [kind for kind in re.split(r"[,+]", args.kinds) if kind.strip()]
    change = client.add_runner(
        args.runner, args.runner_address, pool=args.pool, kinds=kinds, reason=args.reason
    )
    if args.json:
        emit_json(admin_render.runner_change_json(change))
    else:
        emit(admin_render.added_headline(change))
    return ExitCode.OK


def configure_remove(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runner", metavar="NAME", help="a member's name")
    reason_option(parser, "kept with the removal record")
    parser.add_argument(
        "--force",
        action="store_true",
        help="even if not drained or turns are bound to it: those turns end TIMED_OUT "
        "RUNNER_REMOVED, execution STARTED or UNKNOWN (never sent elsewhere)",
    )
    parser.add_argument(
        "--generation",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="only that member of the name (GEN in `turnwire admin runners`; 0: the current)",
    )


def run_remove(client: AdminClient, args: argparse.Namespace) -> int:
    result = client.remove_runner(
        args.runner, reason=args.reason, force=args.force, generation=args.generation
    )
    if args.json:
        emit_json(admin_render.removed_json(result))
    else:
        emit(admin_render.removed_headline(result))
    return ExitCode.OK


def run_runners(client: AdminClient, args: argparse.Namespace) -> int:
    runners = client.runners()
    if args.json:
        for runner in runners:
            emit_json(admin_render.runner_json(runner))
    elif not runners:
        emit("no runners configured")
    else:
        emit(admin_render.runners_table(runners))
    return ExitCode.OK


def configure_runners_list(parser: argparse.ArgumentParser) -> None:
    del parser  # no options beyond the common ones


def configure_drain(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runner", metavar="RUNNER", help="a member's name")
    reason_option(parser, "shown with the drain in `turnwire admin runners`")


def run_drain(client: AdminClient, args: argparse.Namespace) -> int:
    change = client.drain(args.runner, reason=args.reason)
    if args.json:
        emit_json(admin_render.runner_change_json(change))
    else:
        emit(admin_render.drain_headline(change, drained=True))
    return ExitCode.OK


def configure_undrain(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runner", metavar="RUNNER", help="a member's name")


def run_undrain(client: AdminClient, args: argparse.Namespace) -> int:
    change = client.undrain(args.runner)
    if args.json:
        emit_json(admin_render.runner_change_json(change))
    else:
        emit(admin_render.drain_headline(change, drained=False))
    return ExitCode.OK


RUNNER_VERBS: tuple[
    tuple[
        str,
        str,
        Callable[[argparse.ArgumentParser], None],
        Callable[[AdminClient, argparse.Namespace], int],
    ],
    ...,
] = (
    (
        "list",
        "every member (the same as `turnwire admin runners`)",
        configure_runners_list,
        run_runners,
    ),
    (
        "add",
        "add a runner to the runner set: every coordinator replica uses it within seconds "
        "(the same fields again: nothing changes)",
        configure_add,
        run_add,
    ),
    (
        "drain",
        "give a runner no new turns (turns bound to it finish there)",
        configure_drain,
        run_drain,
    ),
    ("undrain", "let a drained runner take new turns again", configure_undrain, run_undrain),
    (
        "remove",
        "remove a drained runner with no turns bound to it from the set (or --force)",
        configure_remove,
        run_remove,
    ),
)


def hint_for(error: TurnwireError, args: argparse.Namespace) -> str | None:
    """What to do about a refusal of the runner set, in terms of this command line."""
    if not isinstance(error, NotAllowed):
        return None
    runner = getattr(args, "runner", "NAME")
    if error.reason == "RUNNER_NOT_DRAINED":
        return (
            f"turnwire admin runners drain {runner} --reason TEXT; once "
            "`turnwire admin runners` shows BOUND 0, remove it"
        )
    if error.reason == "RUNNER_HAS_TURNS":
        return "wait until `turnwire admin runners` shows BOUND 0, or add --force"
    if error.reason == "RUNNER_CONFLICT":
        return (
            f"to move it: turnwire admin runners drain {runner}, remove {runner}, then add it again"
        )
    return None
