"""The pure retention rules (PROTOCOL.md §9 K2, K4), as a table."""

from __future__ import annotations

import pytest

from runner_svc.core.model import RowState
from runner_svc.core.retention import (
    CLOCK_SKEW_ALLOWANCE_SECONDS,
    key_ceiling,
    key_droppable,
    key_window_seconds,
    retired_since,
    row_prunable,
    stamp_bound,
)
from runner_svc.core.witness import SEALED_FLOOR

WINDOW_US = 7_000_000


@pytest.mark.rule("K2")
@pytest.mark.parametrize(
    ("state", "released", "settled_at", "released_at", "since"),
    [
        (RowState.ACCEPTED, False, None, None, None),
        (RowState.LAUNCHING, False, None, None, None),
        (RowState.RUNNING, False, None, None, None),
        (RowState.SUCCEEDED, False, 5.0, None, None),  # the coordinator may want its result
        (RowState.FAILED, False, 5.0, None, None),
        (RowState.SUCCEEDED, True, 5.0, 9.0, 9.0),  # from its release, not its settlement
        (RowState.CANCELLED, True, 5.0, 9.0, 9.0),
        (RowState.TIMED_OUT, True, 5.0, 9.0, 9.0),
        (RowState.SUCCEEDED, True, 5.0, None, None),  # release time unknown: keep it
        (RowState.TOMBSTONED, False, 4.0, None, 4.0),  # never released: from the tombstone
    ],
)
def test_what_retires_and_since_when(
    state: RowState,
    released: bool,
    settled_at: float | None,
    released_at: float | None,
    since: float | None,
) -> None:
    """K2: only a released settled row (since its release) or a tombstone (since it was
    written) may ever go; live rows and unreleased results never."""
    assert retired_since(state, released, settled_at, released_at) == since


def test_a_row_goes_only_past_its_horizon() -> None:
    assert not row_prunable(None, now=1e9, retain=0.0)
    assert not row_prunable(100.0, now=199.0, retain=100.0)
    assert row_prunable(100.0, now=200.0, retain=100.0)


@pytest.mark.rule("K4")
def test_a_key_goes_only_past_its_horizon_below_the_floor_and_the_clock() -> None:
    """K4: the stamp bound is the release plus the window; a key goes once its horizon has
    passed and the owner's floor, and the clock minus the window, are at or above it (a
    sealed floor alone never lets a key go early)."""
    bound = stamp_bound(100.0, WINDOW_US)
    assert bound == 107_000_000
    now = 1000.0
    assert not key_droppable(
        900.0, bound, now, retain=200.0, floor=SEALED_FLOOR, window_us=WINDOW_US
    )
    assert not key_droppable(800.0, bound, now, retain=200.0, floor=bound - 1, window_us=WINDOW_US)
    assert key_droppable(800.0, bound, now, retain=200.0, floor=bound, window_us=WINDOW_US)
    assert key_ceiling(SEALED_FLOOR, 110.0, WINDOW_US) == 103_000_000  # the clock caps a seal
    assert not key_droppable(0.0, bound, 110.0, retain=0.0, floor=SEALED_FLOOR, window_us=WINDOW_US)


@pytest.mark.rule("K4", "W2a")
def test_the_key_window_allows_for_clock_skew_however_short_the_admission_window() -> None:
    """K4 (issue 27): the stamp bound and the key ceiling use the key window, the
    admission window but never less than CLOCK_SKEW_ALLOWANCE_SECONDS: with W2a's 0.25 s
    window a Dispatch stamped 10 s past its release (a coordinator clock 10 s ahead) still
    lies below the bound of the key it could run under."""
    assert key_window_seconds(0.25) == CLOCK_SKEW_ALLOWANCE_SECONDS == 60.0
    assert key_window_seconds(120.0) == 120.0
    released_at = 1_000.0
    late_stamp = int((released_at + 10.0) * 1_000_000)
    window_us = int(key_window_seconds(0.25) * 1_000_000)
    assert stamp_bound(released_at, window_us) > late_stamp
    assert stamp_bound(released_at, 250_000) < late_stamp  # the window alone would not do
