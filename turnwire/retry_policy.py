"""A turn's retry policy as plain values: bounds, defaults, the backoff (PROTOCOL.md R15).

One module for every side that reads the policy: the coordinator checks a
submitted policy against :func:`problems` (typed refusal, nothing stored),
the runner's job machine asks :func:`retry_wait` whether and when the next
execution may start, and the SDK and CLI build the wire value from
:class:`RetryRule`. Free of generated code and clocks: times are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

# Bounds a submitted policy is checked against (R15): each retry is another
# execution that may be billed, so a turn gets at most 11 executions.
MAX_RETRIES = 10
MAX_BACKOFF_SECONDS = 3600.0
MAX_MULTIPLIER = 10.0

# What an unset field means.
DEFAULT_INITIAL_BACKOFF = 1.0
DEFAULT_MAX_BACKOFF = 60.0
DEFAULT_MULTIPLIER = 2.0


@dataclass(frozen=True)
class RetryRule:
    """A checked retry policy. ``max_retries`` 0 is no retry (today's behaviour)."""

    max_retries: int = 0
    initial_backoff: float = DEFAULT_INITIAL_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF
    multiplier: float = DEFAULT_MULTIPLIER

    @property
    def max_executions(self) -> int:
        return 1 + self.max_retries

    def backoff(self, ended_execution: int) -> float:
        """The wait after execution ``ended_execution`` (1-based) before the next:
        initial * multiplier^(n-1), capped at max_backoff."""
        exponent = max(0, ended_execution - 1)
        wait = self.initial_backoff * (self.multiplier**exponent)
        return min(wait, self.max_backoff)


def problems(
    max_retries: int,
    initial_backoff: float | None,
    max_backoff: float | None,
    multiplier: float,
) -> list[tuple[str, str]]:
    """Each (field, why) a submitted policy breaks; empty when it is sane (R15).

    ``initial_backoff``/``max_backoff``: None when unset; ``multiplier`` 0 when unset.
    """
    found: list[tuple[str, str]] = []
    if not 0 <= max_retries <= MAX_RETRIES:
        found.append(("max_retries", f"must be 0..{MAX_RETRIES}"))
    for name, value in (("initial_backoff", initial_backoff), ("max_backoff", max_backoff)):
        if value is not None and not 0 <= value <= MAX_BACKOFF_SECONDS:
            found.append((name, f"must be 0..{MAX_BACKOFF_SECONDS:g} seconds"))
    initial = DEFAULT_INITIAL_BACKOFF if initial_backoff is None else initial_backoff
    largest = DEFAULT_MAX_BACKOFF if max_backoff is None else max_backoff
    if not found and largest < initial:
        found.append(("max_backoff", "must be at least initial_backoff"))
    if multiplier != 0 and not 1.0 <= multiplier <= MAX_MULTIPLIER:
        found.append(("backoff_multiplier", f"must be 1..{MAX_MULTIPLIER:g} (0: the default)"))
    return found


def rule(
    max_retries: int,
    initial_backoff: float | None,
    max_backoff: float | None,
    multiplier: float,
) -> RetryRule:
    """The rule a checked policy stands for, defaults filled in."""
    return RetryRule(
        max_retries=max_retries,
        initial_backoff=DEFAULT_INITIAL_BACKOFF if initial_backoff is None else initial_backoff,
        max_backoff=DEFAULT_MAX_BACKOFF if max_backoff is None else max_backoff,
        multiplier=multiplier or DEFAULT_MULTIPLIER,
    )


def retry_wait(
    policy: RetryRule | None,
    *,
    ended_execution: int,
    retry_after: float | None,
    now: float,
    deadline: float | None,
    budget_ends: float | None,
) -> float | None:
    """When the next execution may start after execution ``ended_execution``
    failed with declared effect NONE, or None when it must not (R15): no
    retries left, or the wait would reach the deadline or the budget's end.
    The wait is the larger of the policy's backoff and the executor's hint."""
    if policy is None or ended_execution >= policy.max_executions:
        return None
    wait = max(policy.backoff(ended_execution), retry_after or 0.0)
    at = now + wait
    for limit in (deadline, budget_ends):
        if limit is not None and at >= limit:
            return None
    return at
