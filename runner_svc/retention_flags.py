"""``serve`` flags for the runner's retention (issue 12, PROTOCOL.md §9 K2-K5)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from runner_svc.storage.retention import RunnerRetention
from turnwire.retention import PruneSchedule, parse_horizon, parse_interval


def _typed(parse: Callable[[str], object]) -> Callable[[str], object]:
    def typed(text: str) -> object:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return typed


def _count(limit: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.strip().isdigit() or not 1 <= int(text) <= limit:
            raise argparse.ArgumentTypeError(f"must be an integer 1..{limit}, got {text!r}")
        return int(text)

    return parse


def _env(name: str, default: str) -> str:
    # A string default goes through the flag's type: a bad value is a flag error.
    return os.environ.get("TURNWIRE_RUNNER_" + name) or default


def add_retention_arguments(serve: argparse.ArgumentParser) -> None:
    group = serve.add_argument_group(
        "retention (README, Retention; PROTOCOL.md §9)",
        "A row goes only once settled and released by the coordinator (or a tombstone) "
        "and --retain-released has passed; its bare key stays --retain-pruned-keys longer "
        "(a call about it is refused OPERATION_PRUNED, never answered 'absent'), then goes "
        "once the admission floor has passed it. Never restore a coordinator journal "
        "backup older than the two horizons together.",
    )
    group.add_argument(
        "--retain-released",
        type=_typed(parse_horizon),
        default=_env("RETAIN_RELEASED", "7d"),
        metavar="DURATION",
        help="keep a released row or a tombstone this long (e.g. 7d, 36h; 'never' keeps "
        "all) [TURNWIRE_RUNNER_RETAIN_RELEASED]",
    )
    group.add_argument(
        "--retain-pruned-keys",
        type=_typed(parse_horizon),
        default=_env("RETAIN_PRUNED_KEYS", "30d"),
        metavar="DURATION",
        help="then keep its bare key this long ('never' keeps keys for ever: a restored "
        "coordinator journal of any age then ends such turns UNKNOWN instead of running "
        "them again) [TURNWIRE_RUNNER_RETAIN_PRUNED_KEYS]",
    )
    group.add_argument(
        "--prune-every",
        type=_typed(parse_interval),
        default=_env("PRUNE_EVERY", "60s"),
        metavar="DURATION",
        help="how often the pruning pass runs [TURNWIRE_RUNNER_PRUNE_EVERY]",
    )
    group.add_argument(
        "--prune-batch",
        type=_count(10_000),
        default=_env("PRUNE_BATCH", "500"),
        metavar="N",
        help="rows (or keys) per transaction, so a pass never holds the store long "
        "[TURNWIRE_RUNNER_PRUNE_BATCH]",
    )
    group.add_argument(
        "--prune-max-batches",
        type=_count(100_000),
        default=_env("PRUNE_MAX_BATCHES", "20"),
        metavar="N",
        help="batches per pass at most; the rest waits for the next "
        "[TURNWIRE_RUNNER_PRUNE_MAX_BATCHES]",
    )


def retention_from_args(args: argparse.Namespace) -> RunnerRetention:
    return RunnerRetention(
        retain_released_seconds=args.retain_released,
        retain_keys_seconds=args.retain_pruned_keys,
        schedule=PruneSchedule(
            interval_seconds=args.prune_every,
            batch=args.prune_batch,
            batches_per_run=args.prune_max_batches,
        ),
    )
