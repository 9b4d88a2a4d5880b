"""``serve``'s scheduling flags: fairness, quotas and the queue timeout (README)."""

from __future__ import annotations

import argparse
import os

from coordinator_svc.core.quotas import PrincipalLimits, parse_limits
from turnwire.seconds import positive_seconds


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def _limits(text: str) -> PrincipalLimits:
    try:
        return parse_limits(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def principal_limits(text: str) -> tuple[str, PrincipalLimits]:
    principal, sep, spec = text.partition(":")
    if not sep or not principal:
        raise argparse.ArgumentTypeError(f"expected PRINCIPAL:key=value[,...], got {text!r}")
    return principal, _limits(spec)


def add_scheduling_flags(serve: argparse.ArgumentParser) -> None:
    group = serve.add_argument_group(
        "scheduling: fairness, quotas and queue timeout (README, waiting for capacity)"
    )
    keys = "max_queued=N, max_in_flight=N, submit_rate=PER_SECOND, submit_burst=N, weight=W"
    group.add_argument(
        "--quota",
        type=_limits,
        default=_env("TURNWIRE_QUOTA"),
        metavar="KEY=VALUE[,...]",
        help=f"limits for every principal without its own ({keys}); over a limit "
        "SubmitTurn answers RESOURCE_EXHAUSTED with a RetryInfo (env TURNWIRE_QUOTA; "
        "default: no limits, weight 1)",
    )
    group.add_argument(
        "--principal-quota",
        dest="principal_quotas",
        action="append",
        type=principal_limits,
        metavar="PRINCIPAL:KEY=VALUE[,...]",
        help="one principal's limits and fair-share weight instead of --quota's; repeatable "
        "(env TURNWIRE_PRINCIPAL_QUOTAS: specs separated by newlines)",
    )
    group.add_argument(
        "--queue-timeout",
        type=positive_seconds,
        default=_env("TURNWIRE_QUEUE_TIMEOUT"),
        metavar="SECONDS",
        help="end a turn still QUEUED this long after acceptance TIMED_OUT, QUEUE_TIMEOUT, "
        "NOT_STARTED, unless it sets limits.queue_timeout itself (env TURNWIRE_QUEUE_TIMEOUT; "
        "default: none)",
    )
