"""Retention's shared values (issue 12, PROTOCOL.md §9): horizons, schedules, reports.

Both services forget on a schedule: the coordinator its terminal operations
past the idempotency horizon (K1), a runner its released rows and tombstones,
then their bare keys (K2-K4). What may be forgotten is each service's own
rule (``coordinator_svc/storage/retention.py``, ``runner_svc/core/retention.py``);
this module gives them one flag syntax and one report, and
``turnwire.retention_task`` one scheduled loop. Pure (no asyncio): the
services' configuration imports it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# Words that turn a horizon off: nothing of that kind is ever deleted.
NEVER_WORDS = ("never", "off", "0")
_DURATION = re.compile(r"\A(\d+(?:\.\d+)?)([smhd]?)\Z")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_horizon(text: str) -> float | None:
    """``90s``, ``15m``, ``24h``, ``7d`` or plain seconds -> seconds; ``never``,
    ``off`` or zero (``0``, ``0h``) -> None: keep for ever. ValueError says what
    is accepted."""
    word = text.strip().lower()
    found = _DURATION.match(word)
    if word in NEVER_WORDS or (found is not None and float(found.group(1)) == 0):
        return None
    return parse_interval(word)


def parse_interval(text: str) -> float:
    """A positive duration (``60s``, ``5m``, ``1h``, ``30``); ValueError otherwise."""
    found = _DURATION.match(text.strip().lower())
    if found is None or float(found.group(1)) <= 0:
        raise ValueError(f"expected a positive duration such as 90s, 15m, 24h or 7d, got {text!r}")
    return float(found.group(1)) * _UNIT_SECONDS[found.group(2)]


def describe_horizon(seconds: float | None) -> str:
    """A horizon as the flags write it (for logs and --help)."""
    if seconds is None:
        return "never"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class PruneSchedule:
    """How often a pass runs and how much one may delete.

    ``batch``: the most items (operations, rows, keys) one transaction deletes,
    so a pass never holds a lock for long (SQLite has one writer; on
    PostgreSQL the rows stay locked until COMMIT). ``batches_per_run``: a
    pass stops after this many and leaves the rest to the next run, so one
    pass after a long pause cannot monopolise the database either."""

    interval_seconds: float = 60.0
    batch: int = 500
    batches_per_run: int = 20

    def __post_init__(self) -> None:
        if not self.interval_seconds > 0:
            raise ValueError("the prune interval must be positive")
        # One batch's ids are bound as one IN (...) list: SQLite allows 32766 variables.
        if not 1 <= self.batch <= 10_000:
            raise ValueError(f"the prune batch must be 1..10000, got {self.batch}")
        if not 1 <= self.batches_per_run <= 100_000:
            raise ValueError(f"batches per run must be 1..100000, got {self.batches_per_run}")


@dataclass(frozen=True)
class PruneReport:
    """What one pass deleted, by kind in a fixed order (``{"operations": 3, ...}``)."""

    counts: Mapping[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    batches: int = 0
    # The pass stopped at its batch bound with more left: the next run goes on.
    more: bool = False
    # Anything else worth a word in the log line (say, rows waiting for the floor).
    note: str = ""

    @property
    def pruned(self) -> bool:
        return any(self.counts.values())

    def summary(self) -> str:
        counts = describe_counts(self.counts)
        extra = [self.note] if self.note else []
        if self.more:
            extra.append("more left for the next run")
        tail = f" ({'; '.join(extra)})" if extra else ""
        batches = f"{self.batches} {'batch' if self.batches == 1 else 'batches'}"
        return f"{counts} in {batches}, {self.seconds:.3f} s{tail}"


def describe_counts(counts: Mapping[str, int]) -> str:
    """``{"operations": 1, "events": 3}`` as ``1 operation, 3 events``: the kinds
    are plural nouns ending in s (operations, events, attempts, rows, keys)."""
    return ", ".join(
        f"{n} {kind[:-1] if n == 1 and kind.endswith('s') else kind}" for kind, n in counts.items()
    )
