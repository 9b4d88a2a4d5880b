"""The version skew rule (coordinator_svc/core/compatibility.py; docs/DEPLOYMENT.md, Upgrades)."""

from __future__ import annotations

import pytest

from coordinator_svc.core.compatibility import runner_version_problem


@pytest.mark.parametrize(
    ("runner", "coordinator"),
    [("0.1.0", "0.1.0"), ("0.1.7", "0.1.2"), ("0.0.9", "0.1.0"), ("0.2.0", "0.1.3"),
     ("1.4.0rc1", "1.5.2"), ("0+unknown", "0.9.0"), ("0.1.0", "0+unknown")],
)  # fmt: skip
def test_within_one_minor_version_either_way_a_runner_gets_turns(
    runner: str, coordinator: str
) -> None:
    """Same major, minors at most one apart (newer runner or newer coordinator); a
    development build's 0+unknown carries no promise and is let through."""
    assert runner_version_problem("r1", runner, coordinator) is None


@pytest.mark.parametrize(
    ("runner", "coordinator"),
    [("0.3.0", "0.1.0"), ("0.1.0", "0.3.0"), ("1.0.0", "0.9.0"), ("2.1.0", "1.1.0"), ("", "0.1.0")],
)
def test_outside_the_window_or_with_no_version_a_runner_gets_nothing(
    runner: str, coordinator: str
) -> None:
    """Two minors apart, another major, or no version reported: refused, with the reason."""
    problem = runner_version_problem("r1", runner, coordinator)
    assert problem is not None and problem.startswith("r1 ")
