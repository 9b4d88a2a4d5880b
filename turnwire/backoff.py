"""Exponential backoff, capped: the one formula every retry loop uses.

    backoff_seconds(0, initial=0.05, cap=2.0) == 0.05
    backoff_seconds(3, initial=0.05, cap=2.0) == 0.4
    backoff_seconds(9, initial=0.05, cap=2.0) == 2.0

``streak`` counts the failures in a row before this pause: 0 waits
``initial``, each further failure doubles it, and no pause exceeds ``cap``. A
negative streak counts as 0, and a streak too long for a float waits ``cap``.

No jitter unless asked for: the coordinator's schedules (the journal's
``next_action_at``, the dispatcher's retries) stay deterministic, so the
simulation replays them exactly. The client SDK spreads its retries with
``jitter`` and its own seeded ``rng`` (see :mod:`turnwire.client.retrying`).

Pure: no clock, no sleeping, no global random state.
"""

from __future__ import annotations

import math
import random


def backoff_seconds(
    streak: int,
    *,
    initial: float,
    cap: float,
    multiplier: float = 2.0,
    jitter: float = 0.0,
    rng: random.Random | None = None,
) -> float:
    """The pause after ``streak`` failures in a row: ``min(cap, initial * multiplier**streak)``.

    ``multiplier`` is 2 (doubling) unless a caller's policy says otherwise
    (``RetryPolicy.multiplier``). Given an ``rng``, the pause is drawn
    uniformly from ``[(1 - jitter) * d, d]`` (``d`` the capped pause; one draw
    even when ``jitter`` is 0, so a seeded client's sequence never shifts);
    without one it is ``d`` itself, and a non-zero ``jitter`` is refused.
    """
    if not 0.0 <= jitter <= 1.0:
        raise ValueError("jitter must be within [0, 1]")
    exponent = max(streak, 0)
    try:  # ldexp: initial * 2**exponent exactly, without building 2**exponent
        grown = math.ldexp(initial, exponent) if multiplier == 2 else initial * multiplier**exponent
    except OverflowError:  # a streak in the thousands: past any cap
        grown = math.copysign(math.inf, initial) if initial else 0.0
    ceiling = float(min(cap, grown))
    if rng is None:
        if jitter:
            raise ValueError("jitter needs an rng")
        return ceiling
    return rng.uniform((1.0 - jitter) * ceiling, ceiling)
