"""What a runner may forget, and when (PROTOCOL.md §9 K2-K4). Pure: the store's
retention pass and the deterministic simulation decide with these same functions.

Two stages, each with its own horizon:

1. **The row** (K2) goes once nothing can still need it: a settled row the
   coordinator released (C10: its journal held the turn terminal when it sent
   the Release), or a tombstone; and only ``retain`` seconds after that
   release or tombstone. Its bare key stays (K3): any call about the id is then
   refused OPERATION_PRUNED, never answered "absent".
2. **The key** (K4) goes only ``retain`` seconds later still, and only once the
   store's admission floor is above the key's *stamp bound*: no Dispatch for
   the turn carries a later stamp, so from then on every copy of one, however
   late, is refused DISPATCH_STALE, by this owner and (through the retention
   floor) by every later one.

3. **A row nobody will release** (K6): a settled row the coordinator never
   released (it gave the turn up, TIMED_OUT, or its Release went to an
   incarnation that had ended), or a row an earlier incarnation left
   ACCEPTED, LAUNCHING or RUNNING (nothing of it runs any more, R10). It goes
   ``retain_unreleased`` seconds after it last changed, and its key is kept
   for ever (stamp bound ``KEPT_FOR_EVER``, which no floor reaches): no
   Release vouches that the coordinator's journal holds the turn terminal, so
   nothing may ever answer "absent" for it.

The stamp bound: every Dispatch for a turn was written ahead (C4) before the
turn's terminal write, which came before the coordinator's Release (or, for a
tombstone, before the give-up Cancel that made it; C8b, C11). So each stamp
is below the moment the Release or Cancel left the coordinator, and that is
below the moment the runner recorded it plus the clock skew. Bound = recorded
time + the *key window*: the admission window, but never less than
``CLOCK_SKEW_ALLOWANCE_SECONDS``. The admission window used to serve (it had to
exceed the skew); now that it is short (§6.1 W2a) it may not, and a key dropped
below a late stamp would let that Dispatch run the turn again.
"""

from __future__ import annotations

from runner_svc.core.model import SETTLED_STATES, Refusal, RowState, RunnerRefusal

US_PER_SECOND = 1_000_000
# K6: the stamp bound of a key kept for ever. No admission floor or clock reaches
# it (key_ceiling stays below it), so K4 never drops the key, and the store's
# trigger lets a row nobody released go only with such a key (migration r0005).
KEPT_FOR_EVER = 2**63 - 1
# States a row is stored in while its turn is not settled (R3).
UNSETTLED_STATES = frozenset({RowState.ACCEPTED, RowState.LAUNCHING, RowState.RUNNING})
# What the store's guard trigger says when a row would be written for a pruned
# id (migrations/runner r0004); the store turns it into OPERATION_PRUNED.
PRUNED_MARK = "turnwire: operation pruned"


def pruned_refusal(operation_id: str) -> RunnerRefusal:
    """K3: any call that would read or write a pruned id. Typed, yet NOT definite
    (C6): the turn may well have run here once."""
    return RunnerRefusal(
        Refusal.OPERATION_PRUNED,
        f"{operation_id}: this runner pruned the operation and keeps only its key: it can "
        "say neither that it ran nor that it did not",
    )


def retired_since(
    state: RowState, released: bool, settled_at: float | None, released_at: float | None
) -> float | None:
    """Since when no coordinator can need the row (its release, or its tombstone);
    None: never prunable (live, or settled and still unreleased: the coordinator
    may still be waiting for that result)."""
    if state is RowState.TOMBSTONED:
        return settled_at
    if released and state in SETTLED_STATES and released_at is not None:
        return released_at
    return None


def row_prunable(since: float | None, now: float, retain: float) -> bool:
    """K2: retired, and for at least ``retain`` seconds."""
    return since is not None and since + retain <= now


# K4: the clock skew (coordinator ahead of runner) the key window allows for.
# Generous, because it costs nothing that matters: a key goes this long after
# its release at the earliest, against --retain-pruned-keys' 30 days.
CLOCK_SKEW_ALLOWANCE_SECONDS = 60.0


def key_window_seconds(admission_window_seconds: float) -> float:
    """K4's window (the stamp bound's and the key ceiling's): the admission window,
    never less than the skew allowance (a short admission window, W2a, bounds no
    skew)."""
    return max(admission_window_seconds, CLOCK_SKEW_ALLOWANCE_SECONDS)


def stamp_bound(since: float, window_us: int) -> int:
    """K4: no Dispatch for the turn carries a dispatch_stamp above this."""
    return int(since * US_PER_SECOND) + window_us


def key_ceiling(floor: int, now: float, window_us: int) -> int:
    """The highest stamp bound a key may have and be dropped now: below the owner's
    admission floor, and never past the clock minus the window (a sealed floor,
    2^63-1, must not let a key go whose Dispatch could still be admitted by the
    next owner, which starts from the retention floor, not from the seal)."""
    return min(floor, int(now * US_PER_SECOND) - window_us)


def key_droppable(
    pruned_at: float, bound: int, now: float, retain: float, floor: int, window_us: int
) -> bool:
    """K4: kept ``retain`` seconds after its row went, and below the ceiling."""
    return pruned_at + retain <= now and bound <= key_ceiling(floor, now, window_us)


def abandoned_since(
    state: RowState,
    released: bool,
    *,
    written_by_owner: bool,
    accepted_at: float | None,
    started_at: float | None,
    settled_at: float | None,
) -> float | None:
    """K6: since when a row that no Release will retire has been frozen; None: not
    such a row (released, a tombstone: K2's; or a live turn of the store's owner).

    - settled, unreleased: since it settled (nothing writes it again but a Release);
    - ACCEPTED, LAUNCHING or RUNNING, written by an earlier incarnation (not the
      store's owner, ``written_by_owner`` False): since its last write. That
      incarnation is gone (one live process per store, §6) and its executors
      with it (R10), so the row stays as it is unless a Dispatch takes it over."""
    if released or state is RowState.TOMBSTONED:
        return None
    if state in SETTLED_STATES:
        return settled_at
    if state in UNSETTLED_STATES and not written_by_owner:
        times = [t for t in (accepted_at, started_at) if t is not None]
        return max(times) if times else None
    return None
