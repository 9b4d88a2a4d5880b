"""Retention flags and the ``prune`` command (issue 12, PROTOCOL.md §9 K1).

    python -m coordinator_svc serve ... [--idempotency-horizon 24h] [--prune-every 60s]
                                        [--prune-batch 500] [--prune-max-batches 20]
    python -m coordinator_svc prune [--journal-url URL] [--idempotency-horizon 24h]
                                    [--prune-batch 500] [--prune-max-batches 20] [--dry-run]

Light on purpose (no SQLAlchemy until a command runs), like the other flag
modules: ``--help`` and bad flags answer at once.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from turnwire.retention import PruneSchedule, describe_horizon, parse_horizon, parse_interval

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


def _size_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
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
    _size_flags(group)
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


def add_prune_parser(commands: argparse._SubParsersAction[Any], journal_flag: Any) -> None:
    prune = commands.add_parser(
        "prune",
        help="forget finished operations past the idempotency horizon, once",
        description="Delete terminal, released operations (with their events and attempts) "
        "that finished longer ago than --idempotency-horizon, in batches of --prune-batch, "
        "each its own transaction, at most --prune-max-batches of them, and print what "
        "went. --dry-run deletes nothing and prints what would go. Safe while a "
        "coordinator runs (it prunes the same way on a schedule).",
    )
    journal_flag(prune)
    _size_flags(prune)
    prune.add_argument(
        "--dry-run", action="store_true", help="count what would be deleted; delete nothing"
    )


def run_prune(args: argparse.Namespace, fail: Callable[[int, str], int]) -> int:
    """The ``prune`` command: 0 done (or nothing to do), 1 the journal failed, 2 bad use."""
    import asyncio

    from coordinator_svc.ports import JournalError
    from coordinator_svc.storage.retention import JournalPruner

    retention = retention_from_args(args)
    if retention.horizon_seconds is None:
        return fail(2, "--idempotency-horizon is 'never': nothing may be pruned")
    try:
        pruner = JournalPruner.open(args.journal_url, retention)
    except (JournalError, ValueError) as exc:
        return fail(1, f"cannot open the journal: {exc}")
    horizon = describe_horizon(retention.horizon_seconds)
    try:
        if args.dry_run:
            counts = pruner.count()
            listed = ", ".join(f"{n} {kind}" for kind, n in counts.items())
            print(f"would prune {listed} (finished more than {horizon} ago)", flush=True)
            return 0
        report = asyncio.run(pruner.prune())
    except JournalError as exc:
        return fail(1, f"prune failed (its last batch rolled back): {exc}")
    finally:
        pruner.close()
    print(f"pruned {report.summary()} (finished more than {horizon} ago)", flush=True)
    return 0
