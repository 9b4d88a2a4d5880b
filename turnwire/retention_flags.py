"""The retention flags both services take (PROTOCOL.md §9): argparse types for
horizons, intervals and counts, and the flags that pace a pruning pass.

Each service names its own horizons (the coordinator ``--idempotency-horizon``,
a runner ``--retain-released`` and the like, in its own ``retention_flags``);
the pace of a pass (``--prune-batch``, ``--prune-max-batches``,
``--prune-every``) is spelled the same on both, with the service's environment
prefix. A default is a string from the environment or the flag's own, so a bad
environment value is refused like a bad flag (exit 2, one line).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TypeVar

from turnwire.retention import PruneSchedule, parse_horizon, parse_interval

T = TypeVar("T")

ArgumentHolder = argparse.ArgumentParser | argparse._ArgumentGroup


def flag_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """``parse`` as an argparse type: its ValueError is a flag error (exit 2, one line)."""

    def typed(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return typed


horizon_type = flag_type(parse_horizon)
interval_type = flag_type(parse_interval)


def count_type(limit: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.strip().isdigit() or not 1 <= int(text) <= limit:
            raise argparse.ArgumentTypeError(f"must be an integer 1..{limit}, got {text!r}")
        return int(text)

    return parse


def env_default(variable: str, default: str) -> str:
    return os.environ.get(variable) or default


def add_batch_flags(parser: ArgumentHolder, *, env_prefix: str, per_batch: str) -> None:
    """``--prune-batch`` and ``--prune-max-batches``; ``per_batch`` says what one
    transaction deletes (for --help)."""
    parser.add_argument(
        "--prune-batch",
        type=count_type(10_000),
        default=env_default(f"{env_prefix}PRUNE_BATCH", "500"),
        metavar="N",
        help=f"{per_batch} per transaction, so pruning never holds a lock for long "
        f"(env {env_prefix}PRUNE_BATCH; default %(default)s)",
    )
    parser.add_argument(
        "--prune-max-batches",
        type=count_type(100_000),
        default=env_default(f"{env_prefix}PRUNE_MAX_BATCHES", "20"),
        metavar="N",
        help="batches per run at most; the rest waits for the next run "
        f"(env {env_prefix}PRUNE_MAX_BATCHES; default %(default)s)",
    )


def add_every_flag(parser: ArgumentHolder, *, env_prefix: str) -> None:
    parser.add_argument(
        "--prune-every",
        type=interval_type,
        default=env_default(f"{env_prefix}PRUNE_EVERY", "60s"),
        metavar="DURATION",
        help=f"how often the pruning pass runs while serving (env {env_prefix}PRUNE_EVERY; "
        "default %(default)s)",
    )


def schedule_from_args(args: argparse.Namespace) -> PruneSchedule:
    """The pace the flags above set (``--prune-every`` 60 s where a command has none)."""
    return PruneSchedule(
        interval_seconds=getattr(args, "prune_every", 60.0),
        batch=args.prune_batch,
        batches_per_run=args.prune_max_batches,
    )
