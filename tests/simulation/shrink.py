"""Shrinking a failing schedule to a short one that fails the same way.

Delta debugging over the step labels: drop chunks (halves, quarters, ...,
single steps) while the replay still violates the same invariant. Replays
skip steps that are no longer enabled, so any subsequence is a schedule.
"""

from __future__ import annotations

from tests.simulation.simulator import PolicyFactory, RunResult, Setup, SimConfig, replay


def same_failure(violation: str | None, wanted: str) -> bool:
    """The same invariant (the bracketed tag) is violated."""
    return violation is not None and violation.split("]")[0] == wanted.split("]")[0]


def shrink(
    setup: Setup,
    labels: list[str],
    violation: str,
    config: SimConfig | None = None,
    policy: PolicyFactory | None = None,
    max_replays: int = 3000,
) -> tuple[list[str], RunResult]:
    """The shortest label list found (bounded work) that still fails like ``violation``."""
    config = config or SimConfig()
    quiet = SimConfig(**{**config.__dict__, "trace": False})
    current = list(labels)
    replays = 0
    chunk = max(len(current) // 2, 1)
    while chunk >= 1 and replays < max_replays:
        start, removed_any = 0, False
        while start < len(current) and replays < max_replays:
            candidate = current[:start] + current[start + chunk :]
            replays += 1
            if same_failure(replay(setup, candidate, quiet, policy).violation, violation):
                current, removed_any = candidate, True
            else:
                start += chunk
        if not removed_any:
            chunk //= 2
    final = replay(setup, current, config, policy)
    return current, final
