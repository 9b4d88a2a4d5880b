"""turnwire.backoff: the one exponential-backoff formula (issue 9)."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnwire.backoff import backoff_seconds
from turnwire.client import RetryPolicy


def test_streak_zero_waits_initial_then_doubles_up_to_the_cap() -> None:
    """0 -> initial, each failure doubles it, and no pause passes the cap."""
    pauses = [backoff_seconds(n, initial=0.05, cap=2.0) for n in range(10)]
    assert pauses == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0, 2.0]
    assert all(isinstance(p, float) for p in pauses)


def test_a_negative_streak_counts_as_zero() -> None:
    assert backoff_seconds(-1, initial=0.05, cap=2.0) == 0.05
    assert backoff_seconds(-50, initial=0.05, cap=2.0) == 0.05


def test_a_streak_too_long_for_a_float_waits_the_cap() -> None:
    """An ever-failing loop's counter never turns into an OverflowError."""
    assert backoff_seconds(10_000, initial=0.05, cap=2.0) == 2.0
    assert backoff_seconds(10_000, initial=0.0, cap=2.0) == 0.0


def test_no_jitter_without_an_rng_and_jitter_without_one_is_refused() -> None:
    assert backoff_seconds(2, initial=0.1, cap=5.0) == backoff_seconds(2, initial=0.1, cap=5.0)
    with pytest.raises(ValueError, match="rng"):
        backoff_seconds(2, initial=0.1, cap=5.0, jitter=0.5)
    with pytest.raises(ValueError, match="jitter"):
        backoff_seconds(2, initial=0.1, cap=5.0, jitter=1.5, rng=random.Random(0))


@given(
    streak=st.integers(min_value=-5, max_value=2000),
    initial=st.floats(min_value=0.0, max_value=10.0),
    cap=st.floats(min_value=0.0, max_value=60.0),
    jitter=st.floats(min_value=0.0, max_value=1.0),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_the_pause_is_the_capped_doubling_and_jitter_stays_below_it(
    streak: int, initial: float, cap: float, jitter: float, seed: int
) -> None:
    """Without an rng: min(cap, initial * 2**max(streak, 0)), exactly; never decreasing
    in the streak. With one: within [(1 - jitter) * that, that]."""
    ceiling = backoff_seconds(streak, initial=initial, cap=cap)
    expected = float(min(Fraction(cap), Fraction(initial) * 2 ** max(streak, 0)))
    assert ceiling == expected
    assert backoff_seconds(streak + 1, initial=initial, cap=cap) >= ceiling
    drawn = backoff_seconds(
        streak, initial=initial, cap=cap, jitter=jitter, rng=random.Random(seed)
    )
    assert (1.0 - jitter) * ceiling <= drawn <= ceiling


def test_the_sdk_schedule_is_the_formula_with_its_own_jitter_and_seeded_draws() -> None:
    """RetryPolicy.pause is backoff_seconds with streak = retry - 1, drawing exactly
    what the client drew before: rng.uniform((1 - jitter) * ceiling, ceiling)."""
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=0.7, multiplier=3.0, jitter=0.25)
    ours, reference = random.Random(7), random.Random(7)
    for retry in range(1, 8):
        ceiling = min(0.7, 0.1 * 3.0 ** (retry - 1))
        assert policy.pause(retry, ours) == reference.uniform(0.75 * ceiling, ceiling)
