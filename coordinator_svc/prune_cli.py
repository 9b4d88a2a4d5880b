"""``python -m coordinator_svc prune``: forget finished operations once (PROTOCOL.md §9 K1).

    python -m coordinator_svc prune [--journal-url URL] [--idempotency-horizon 24h]
                                    [--prune-batch 500] [--prune-max-batches 20] [--dry-run]

The same rule and batches as the coordinator's scheduled pass
(``storage/retention.py``); safe while a coordinator runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from coordinator_svc.retention_flags import retention_from_args, size_flags
from turnwire.retention import describe_counts, describe_horizon


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
    size_flags(prune)
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
            listed = describe_counts(counts)
            print(f"would prune {listed} (finished more than {horizon} ago)", flush=True)
            return 0
        report = asyncio.run(pruner.prune())
    except JournalError as exc:
        return fail(1, f"prune failed (its last batch rolled back): {exc}")
    finally:
        pruner.close()
    print(f"pruned {report.summary()} (finished more than {horizon} ago)", flush=True)
    return 0
