"""``serve``'s timing flags: one per seconds field of DispatchTimings, each with its
variable (TURNWIRE_<NAME>) and default."""

from __future__ import annotations

import argparse
import dataclasses
import os

from coordinator_svc.config import DispatchTimings
from turnwire.seconds import positive_seconds


def _env(name: str, fallback: str) -> str:
    value = os.environ.get(name)
    return value if value not in (None, "") else fallback


# What each DispatchTimings field does, for its flag's help (coordinator_svc/config.py).
_TIMING_HELP = {
    "preflight_timeout": "deadline of a status read of a runner (preflight, GetRunnerInfo)",
    "dispatch_timeout": "deadline of a Dispatch; with no reply by then the operation goes "
    "DISPATCH_UNKNOWN (PROTOCOL.md C7); it may exceed the runners' --admission-window: a "
    "Dispatch arriving after it is refused DISPATCH_STALE and sent again (W2a, C6c)",
    "cancel_timeout": "deadline of a Cancel sent to a runner",
    "release_timeout": "deadline of a Release sent to a runner",
    "backoff_initial": "first pause before trying an operation again (it grows with each failure "
    "in a row)",
    "backoff_max": "longest pause between tries of one operation",
    "reconcile_deadline": "how long DISPATCH_UNKNOWN waits for an unreachable runner before "
    "the turn ends TIMED_OUT, RECONCILE_DEADLINE (PROTOCOL.md C8)",
    "idle_poll": "how often the scheduler looks for due work when nothing woke it",
    "status_poll": "fallback status read of a RUNNING/CANCELLING operation, in case its "
    "runner's watch stream is lost",
    "watched_status_poll": "the same fallback read while a live watch stream follows the "
    "operation's runner incarnation (it replays anything missed, PROTOCOL.md C9a)",
    "settle_grace": "how long an accepted Dispatch reply waits for the runner's watch to "
    "report the result, so a fast turn ends in one commit",
    "start_grace": "then how long it waits for the confirmed start, so RUNNING records "
    "execution STARTED (R3) in the same commit",
    "live_within": "a turn's first attempt skips its status read (PROTOCOL.md C2a) only if "
    "the runner's watch stream delivered something this recently; otherwise it asks first, "
    "so a runner that just died fails the status read, not an ambiguous Dispatch",
}


def add_timing_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("timings (seconds; each also reads TURNWIRE_<NAME>)")
    for spec in dataclasses.fields(DispatchTimings):
        if not isinstance(spec.default, float):
            continue  # only plain seconds become flags; anything else keeps its default
        flag = "--" + spec.name.replace("_", "-")
        env = "TURNWIRE_" + spec.name.upper()
        group.add_argument(
            flag,
            dest=spec.name,
            type=positive_seconds,
            default=_env(env, str(spec.default)),
            metavar="SECONDS",
            help=f"{_TIMING_HELP[spec.name]} (env {env}; default {spec.default})",
        )
