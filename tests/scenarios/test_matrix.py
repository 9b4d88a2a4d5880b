"""The scenario matrix is complete and honest (no process is started here)."""

from __future__ import annotations

import pytest

from tests.scenarios.cells import Fault, Phase
from tests.scenarios.drivers import DRIVERS
from tests.scenarios.matrix import CELLS, ISSUE_3_CELLS, tally
from turnwire.crashpoints import CRASH_POINTS
from turnwire.faults import parse_rule


def test_every_fault_phase_cell_is_listed_once_as_scenario_or_not_applicable() -> None:
    """§8 scenario matrix: all 8 x 7 cells appear, each applicable or N/A with a reason."""
    main = [(c.fault, c.phase) for c in CELLS if not c.variant]
    assert sorted(main) == sorted((f, p) for f in Fault for p in Phase)
    for cell in CELLS:
        assert cell.applicable != bool(cell.not_applicable), cell.name
        assert cell.applicable == (cell.legal is not None), cell.name
    assert len({c.name for c in CELLS}) == len(CELLS)
    figures = tally()
    assert figures.applicable_cells + figures.na_cells == len(Fault) * len(Phase)


def test_every_applicable_cell_names_a_driver_valid_rules_and_a_known_crash_point() -> None:
    """§8 scenario matrix: every injection is runnable as written (rules parse, points exist)."""
    for cell in CELLS:
        if cell.injection is None or cell.legal is None:
            continue
        assert cell.injection.driver in DRIVERS, cell.name
        for text in cell.injection.rules:
            parse_rule(text)
        point = cell.injection.crash_point
        assert point is None or point in CRASH_POINTS, cell.name
        low, high = cell.legal.attempts
        assert 0 <= low <= high and cell.legal.min_starts <= cell.legal.max_starts <= 1
        assert cell.legal.why and cell.injection.how and cell.pins, cell.name


@pytest.mark.rule("C12")
def test_issue_3_cells_arm_both_dispatching_crash_points() -> None:
    """C12 (issue #3): the coordinator is SIGKILLed after the attempt commit and after the send."""
    by_name = {c.name: c for c in CELLS}
    points = {by_name[name].injection.crash_point for name in ISSUE_3_CELLS}  # type: ignore[union-attr]
    assert points == {"coordinator.after_attempt_commit", "coordinator.after_dispatch_send"}
