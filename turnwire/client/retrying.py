"""How long to wait between attempts: exponential backoff with jitter, bounded.

Pure: the clock and the random source are passed in, so tests replay a
schedule exactly and never sleep.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from turnwire.backoff import backoff_seconds


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds on retrying one call after a transient failure.

    ``attempts`` counts every try including the first (1 = never retry).
    ``total_seconds`` bounds the time spent across attempts and pauses.
    Jitter draws each pause uniformly from [(1 - jitter) * d, d], so clients
    that failed together do not retry together.
    """

    attempts: int = 5
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.5
    total_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter must be within [0, 1]")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.total_seconds <= 0:
            raise ValueError("backoffs must be >= 0 and total_seconds > 0")

    def pause(self, retry_number: int, rng: random.Random) -> float:
        """The pause before retry ``retry_number`` (1 = the first retry)."""
        return backoff_seconds(
            retry_number - 1,
            initial=self.initial_backoff,
            cap=self.max_backoff,
            multiplier=self.multiplier,
            jitter=self.jitter,
            rng=rng,
        )


NO_RETRY = RetryPolicy(attempts=1)


class RetryBudget:
    """Counts attempts and time for one call; says whether another try fits."""

    def __init__(self, policy: RetryPolicy, clock: Callable[[], float], rng: random.Random) -> None:
        self._policy = policy
        self._clock = clock
        self._rng = rng
        self._started = clock()
        self.attempts = 0

    def start_attempt(self) -> None:
        self.attempts += 1

    def reset(self) -> None:
        """Progress was made (a watch received an event): the budget starts over."""
        self._started = self._clock()
        self.attempts = 0

    def next_pause(self) -> float | None:
        """The pause before the next attempt, or None when the budget is spent."""
        if self.attempts >= self._policy.attempts:
            return None
        pause = self._policy.pause(self.attempts, self._rng)
        elapsed = self._clock() - self._started
        if elapsed + pause > self._policy.total_seconds:
            return None
        return pause
