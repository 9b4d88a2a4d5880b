"""Retention in the simulated runner store (issue 12, PROTOCOL.md §9 K2-K4).

The simulated runner prunes before every call it handles (as it raises its
floor), by the real rules of ``runner_svc.core.retention`` with both horizons
zero: a row goes as soon as it is released (or tombstoned), its key as soon
as the admission floor passes the key's stamp bound. That is retention as
eager as the rules allow, so the schedules meet pruned ids as often as they
can. The broken variants (``BROKEN_RETENTION``) each drop one of the rules;
``test_teeth.py`` shows the checker catching them.

Times: the simulated runner's row times are virtual seconds, stamps are
microseconds since the Unix epoch (``world.stamp_at``); the rules take Unix
seconds, so times are converted on the way in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runner_svc.core.model import OperationRow
from runner_svc.core.retention import (
    KEPT_FOR_EVER,
    US_PER_SECOND,
    abandoned_since,
    key_droppable,
    key_window_seconds,
    retired_since,
    row_prunable,
    stamp_bound,
)
from tests.simulation.world import stamp_at

if TYPE_CHECKING:
    from tests.simulation.sim_runner import SimStore

# K4's key window at the real runner's default admission window: never less than
# the clock-skew allowance (runner_svc.core.retention.key_window_seconds), which
# exceeds the simulated replicas' skew (20 s).
WINDOW_US = int(key_window_seconds(0.25) * US_PER_SECOND)


def unix(seconds: float) -> float:
    """Virtual seconds as Unix seconds (the clock the rules take)."""
    return stamp_at(seconds) / US_PER_SECOND


def released_or_tombstoned(row: OperationRow, released_at: float | None) -> float | None:
    """K2's rule (runner_svc.core.retention.retired_since)."""
    return retired_since(row.state, row.released, row.settled_at, released_at)


@dataclass(frozen=True)
class SimRetention:
    """How the simulated store forgets; the defaults are the protocol's rules."""

    retain_rows: float = 0.0
    retain_keys: float = 0.0
    # Since when a row is retired (None: never prunable).
    retired: Callable[[OperationRow, float | None], float | None] = released_or_tombstoned
    # K3: a pruned row leaves its key.
    keep_keys: bool = True
    # K4: may this key go now? (pruned_at, bound, now, retain, floor, window; Unix seconds)
    key_may_go: Callable[[float, int, float, float, int, int], bool] = key_droppable
    # K6: rows no Release retires go this long (virtual seconds) after they last
    # changed, their keys kept for ever; None: kept (the real runner's 'never').
    retain_unreleased: float | None = None
    # K6's key: the for-ever bound (broken variant: the bound a released row gets).
    abandoned_bound: Callable[[float], int] = lambda _since: KEPT_FOR_EVER
    # K4's key window (µs): the shipped one; a schedule kept from before W2a replays
    # with the 7 s it was found under.
    key_window_us: int = WINDOW_US


def prune(store: SimStore, rules: SimRetention, now: float, counters: Counter[str]) -> None:
    """One retention pass over the store (the runner's scheduled pass, run eagerly)."""
    for operation_id, row in list(store.rows.items()):
        since = rules.retired(row, store.released_at.get(operation_id))
        if since is None or not row_prunable(since, now, rules.retain_rows):
            continue
        del store.rows[operation_id]
        counters["retention:row_pruned"] += 1
        if rules.keep_keys:
            store.pruned[operation_id] = (stamp_bound(unix(since), rules.key_window_us), now)
    if rules.retain_unreleased is not None:
        _prune_abandoned(store, rules, rules.retain_unreleased, now, counters)
    for operation_id, (bound, pruned_at) in list(store.pruned.items()):
        if rules.key_may_go(
            unix(pruned_at), bound, unix(now), rules.retain_keys, store.floor, rules.key_window_us
        ):
            store.retention_floor = max(store.retention_floor, bound)
            del store.pruned[operation_id]
            counters["retention:key_dropped"] += 1


def _prune_abandoned(
    store: SimStore, rules: SimRetention, retain: float, now: float, counters: Counter[str]
) -> None:
    """K6: settled rows never released, and unsettled rows an earlier owner left."""
    for operation_id, row in list(store.rows.items()):
        since = abandoned_since(
            row.state,
            row.released,
            written_by_owner=row.incarnation_id == store.owner,
            accepted_at=row.accepted_at,
            started_at=row.started_at,
            settled_at=row.settled_at,
        )
        if since is None or not row_prunable(since, now, retain):
            continue
        del store.rows[operation_id]
        counters["retention:abandoned_pruned"] += 1
        store.pruned[operation_id] = (rules.abandoned_bound(since), now)


# The broken K6 variant's key window: the 7 s the key window was before W2a, so
# the harm of a finite bound shows within test_retention_sim's budget (with the
# shipped 60 s it shows too, about ten times later: seed 1534 of 2000).
_BROKEN_KEY_WINDOW_US = 7_000_000


def _released_bound(since: float) -> int:
    """Broken K6: the key gets a released row's bound, so K4 may drop it."""
    return stamp_bound(unix(since), _BROKEN_KEY_WINDOW_US)


def _before_release(row: OperationRow, released_at: float | None) -> float | None:
    """Broken K2: a settled row retires when it settles, released or not."""
    return row.settled_at if row.settled else None


def _always(*_: object) -> bool:
    return True


# Each drops one rule of §9 (test_teeth.py).
BROKEN_RETENTION = {
    # K2 + K3 off: a settled row goes before its Release, and leaves nothing behind.
    "prune_before_release": SimRetention(retired=_before_release, keep_keys=False),
    # K3 off: a released row goes and leaves no key (absence is read as proof).
    "forget_keys_at_once": SimRetention(keep_keys=False),
    # K4 off: keys go at once, whatever the floor.
    "drop_keys_below_the_floor": SimRetention(key_may_go=_always),
    # K6 without its for-ever key: an unreleased row's key goes like a released one's.
    "unreleased_keys_dropped": SimRetention(
        retain_unreleased=0.0,
        abandoned_bound=_released_bound,
        key_window_us=_BROKEN_KEY_WINDOW_US,
    ),
}
