"""Retention settings and flags (issue 12, PROTOCOL.md §9 K1).

    python -m coordinator_svc serve ... [--idempotency-horizon 24h] [--prune-every 60s]
                                        [--prune-batch 500] [--prune-max-batches 20]

Pure on purpose: ``config`` (which the core reads) imports ``JournalRetention``
from here, so nothing here may reach SQL, asyncio or the wire; the ``prune``
command lives in ``prune_cli``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from turnwire.retention import PruneSchedule
from turnwire.retention_flags import (
    add_batch_flags,
    add_every_flag,
    env_default,
    horizon_type,
    schedule_from_args,
)

ENV_PREFIX = "TURNWIRE_"

# Payment APIs keep idempotency keys about a day; so does Turnwire by default.
DEFAULT_HORIZON_SECONDS = 24 * 3600.0


@dataclass(frozen=True)
class JournalRetention:
    """How long a terminal, released operation (and its key) is kept, and the pass's pace.

    ``horizon_seconds`` None: never forget anything (every key stays a replay)."""

    horizon_seconds: float | None = DEFAULT_HORIZON_SECONDS
    schedule: PruneSchedule = field(default_factory=PruneSchedule)


def size_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--idempotency-horizon",
        type=horizon_type,
        default=env_default("TURNWIRE_IDEMPOTENCY_HORIZON", "24h"),
        metavar="DURATION",
        help="how long a finished operation is kept (its status, events, attempts and its "
        "idempotency key) once terminal and released to its runner: e.g. 24h, 7d, 90m; "
        "'never' (or 0) keeps everything. After it, GetOperation says NOT_FOUND and a "
        "SubmitTurn with the same key is a NEW operation that runs again (PROTOCOL.md §9 "
        "K1) (env TURNWIRE_IDEMPOTENCY_HORIZON; default 24h)",
    )
    add_batch_flags(
        parser,
        env_prefix=ENV_PREFIX,
        per_batch="operations deleted (with their events and attempts)",
    )


def add_retention_flags(serve: argparse.ArgumentParser) -> None:
    group = serve.add_argument_group(
        "retention: forgetting finished operations (README, Retention; PROTOCOL.md §9)"
    )
    size_flags(group)
    add_every_flag(group, env_prefix=ENV_PREFIX)


def retention_from_args(args: argparse.Namespace) -> JournalRetention:
    return JournalRetention(
        horizon_seconds=args.idempotency_horizon, schedule=schedule_from_args(args)
    )
