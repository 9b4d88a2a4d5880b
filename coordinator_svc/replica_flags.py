"""``serve`` flags for replicas sharing one PostgreSQL journal (issue 12, §5)."""

from __future__ import annotations

import argparse
import os
import re
import socket
from collections.abc import Callable

from coordinator_svc.dispatcher.ownership import DEFAULT_LEASE_TTL, check_replica_name


def _replica_id(text: str) -> str:
    try:
        return check_replica_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds_between(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a number of seconds in [low, high]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be between {low:g} and {high:g} seconds, got {text}"
            )
        return value

    return parse


def add_replica_flags(serve: argparse.ArgumentParser) -> None:
    group = serve.add_argument_group(
        "replicas: several coordinators on one PostgreSQL journal (README, Replicas)"
    )
    group.add_argument(
        "--replica-id",
        type=_replica_id,
        default=os.environ.get("TURNWIRE_REPLICA_ID") or None,
        metavar="NAME",
        help="this coordinator's id among the replicas sharing a PostgreSQL journal; unique "
        "per running process, kept across its restarts (a restart then adopts the previous "
        "process's operations at once instead of after the lease TTL). PostgreSQL only: a "
        "SQLite journal serves one coordinator and refuses a second (env "
        "TURNWIRE_REPLICA_ID; default on PostgreSQL: this host's name)",
    )
    group.add_argument(
        "--lease-ttl",
        type=_seconds_between(1.0, 3600.0),
        default=os.environ.get("TURNWIRE_LEASE_TTL") or DEFAULT_LEASE_TTL,
        metavar="SECONDS",
        help="how long a replica's leases last without renewal: a replica that dies or "
        "pauses loses its operations to the others after about this long (renewed every "
        f"quarter of it; env TURNWIRE_LEASE_TTL; default {DEFAULT_LEASE_TTL:g})",
    )

    group.add_argument(
        "--watch-poll",
        dest="watch_poll_seconds",
        type=_seconds_between(0.05, 600.0),
        default=os.environ.get("TURNWIRE_WATCH_POLL") or 1.0,
        metavar="SECONDS",
        help="how often an open watch re-reads the journal when nothing woke it: a commit "
        "on this replica wakes it at once, and on PostgreSQL so does another replica's "
        "(NOTIFY); the poll is the fallback (env TURNWIRE_WATCH_POLL; default 1)",
    )


def default_replica_id() -> str:
    """This host's name, cut to what a replica id may hold."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()).strip(".-_")[:63]
    return name or "coordinator"
