"""``serve`` flags for the runner's retention (issues 12-13, PROTOCOL.md §9 K2-K7); the
pace flags (``--prune-*``) are shared with the coordinator (turnwire.retention_flags)."""

from __future__ import annotations

import argparse

from runner_svc.storage.retention import RunnerRetention
from turnwire.retention_flags import (
    add_batch_flags,
    add_every_flag,
    env_default,
    horizon_type,
    schedule_from_args,
)

ENV_PREFIX = "TURNWIRE_RUNNER_"


def _horizon_flag(group: argparse._ArgumentGroup, flag: str, default: str, says: str) -> None:
    variable = ENV_PREFIX + flag.removeprefix("--").replace("-", "_").upper()
    group.add_argument(
        flag,
        type=horizon_type,
        default=env_default(variable, default),
        metavar="DURATION",
        help=f"{says} (env {variable}; default %(default)s)",
    )


def add_retention_arguments(serve: argparse.ArgumentParser) -> None:
    group = serve.add_argument_group(
        "retention (README, Retention; PROTOCOL.md §9)",
        "A row goes only once settled and released by the coordinator (or a tombstone) "
        "and --retain-released has passed; its bare key stays --retain-pruned-keys longer "
        "(a call about it is refused OPERATION_PRUNED, never answered 'absent'), then goes "
        "once the admission floor has passed it. Never restore a coordinator journal "
        "backup older than the two horizons together. A row no Release retires goes after "
        "--retain-unreleased, its key kept for ever.",
    )
    _horizon_flag(
        group,
        "--retain-released",
        "7d",
        "keep a released row or a tombstone this long (e.g. 7d, 36h; 'never' keeps all)",
    )
    _horizon_flag(
        group,
        "--retain-pruned-keys",
        "30d",
        "then keep its bare key this long ('never' keeps keys for ever: a restored "
        "coordinator journal of any age then ends such turns UNKNOWN instead of running "
        "them again)",
    )
    _horizon_flag(
        group,
        "--retain-unreleased",
        "30d",
        "a row no Release will ever retire (a settled turn the coordinator gave up on or "
        "never released, or one an earlier runner process left unsettled) goes this long "
        "after it last changed, its bare key kept for ever so the turn never runs again; "
        "keep it above the longest a coordinator may be cut off from this runner ('never' "
        "keeps such rows; PROTOCOL.md §9 K6)",
    )
    add_every_flag(group, env_prefix=ENV_PREFIX)
    add_batch_flags(group, env_prefix=ENV_PREFIX, per_batch="rows (or keys) deleted")


def retention_from_args(args: argparse.Namespace) -> RunnerRetention:
    return RunnerRetention(
        retain_released_seconds=args.retain_released,
        retain_keys_seconds=args.retain_pruned_keys,
        schedule=schedule_from_args(args),
        retain_unreleased_seconds=args.retain_unreleased,
    )
