"""Retention settings and flags (issue 12, PROTOCOL.md §9 K1).

    python -m coordinator_svc serve ... [--idempotency-horizon 24h] [--prune-every 60s]
                                        [--prune-batch 500] [--prune-max-batches 20]

Pure on purpose: ``config`` (which the core reads) imports ``JournalRetention``
from here, so nothing here may reach SQL, asyncio or the wire; the ``prune``
command lives in ``prune_cli``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from turnwire.retention import PruneSchedule, parse_horizon, parse_interval

# Payment APIs keep idempotency keys about a day; so does Turnwire by default.
DEFAULT_HORIZON_SECONDS = 24 * 3600.0


@dataclass(frozen=True)
class JournalRetention:
    """How long a terminal, released operation (and its key) is kept, and the pass's pace.

    ``horizon_seconds`` None: never forget anything (every key stays a replay)."""

    horizon_seconds: float | None = DEFAULT_HORIZON_SECONDS
    schedule: PruneSchedule = field(default_factory=PruneSchedule)


def _horizon(text: str) -> float | None:
    try:
        return parse_horizon(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _interval(text: str) -> float:
    try:
        return parse_interval(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(limit: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.strip().isdigit() or not 1 <= int(text) <= limit:
            raise argparse.ArgumentTypeError(f"must be an integer 1..{limit}, got {text!r}")
        return int(text)

    return parse


def _env(name: str, default: str) -> str:
    # A string default: argparse runs it through the flag's type, so a bad
    # environment value is refused like a bad flag (exit 2, one line).
    return os.environ.get(name) or default


def size_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--idempotency-horizon",
        type=_horizon,
        default=_env("TURNWIRE_IDEMPOTENCY_HORIZON", "24h"),
        metavar="DURATION",
        help="how long a finished operation is kept (its status, events, attempts and its "
        "idempotency key) once terminal and released to its runner: e.g. 24h, 7d, 90m; "
        "'never' (or 0) keeps everything. After it, GetOperation says NOT_FOUND and a "
        "SubmitTurn with the same key is a NEW operation that runs again (PROTOCOL.md §9 "
        "K1) (env TURNWIRE_IDEMPOTENCY_HORIZON; default 24h)",
    )
    parser.add_argument(
        "--prune-batch",
        type=_count(10_000),
        default=_env("TURNWIRE_PRUNE_BATCH", "500"),
        metavar="N",
        help="operations deleted per transaction (with their events and attempts), so "
        "pruning never holds a lock for long (env TURNWIRE_PRUNE_BATCH; default 500)",
    )
    parser.add_argument(
        "--prune-max-batches",
        type=_count(100_000),
        default=_env("TURNWIRE_PRUNE_MAX_BATCHES", "20"),
        metavar="N",
        help="batches per run at most; the rest waits for the next run "
        "(env TURNWIRE_PRUNE_MAX_BATCHES; default 20)",
    )


def add_retention_flags(serve: argparse.ArgumentParser) -> None:
    group = serve.add_argument_group(
        "retention: forgetting finished operations (README, Retention; PROTOCOL.md §9)"
    )
    size_flags(group)
    group.add_argument(
        "--prune-every",
        type=_interval,
        default=_env("TURNWIRE_PRUNE_EVERY", "60s"),
        metavar="DURATION",
        help="how often the pruning pass runs while serving (env TURNWIRE_PRUNE_EVERY; "
        "default 60s)",
    )


def retention_from_args(args: argparse.Namespace) -> JournalRetention:
    return JournalRetention(
        horizon_seconds=args.idempotency_horizon,
        schedule=PruneSchedule(
            interval_seconds=getattr(args, "prune_every", 60.0),
            batch=args.prune_batch,
            batches_per_run=args.prune_max_batches,
        ),
    )
