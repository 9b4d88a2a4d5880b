"""Every applicable cell of the scenario matrix, on real processes, on SQLite and PostgreSQL.

Each scenario drives one operation through its cell's fault (tests/scenarios/
matrix.py says how), then asserts the cell's legal outcome (state, execution,
attempt_count, executor starts in the metered ledger, replay and reconcile)
and runs the invariant oracle over the journal, both runner stores and the
ledger: no violation may concern the operation. A scenario that only proves
a cell vacuous is fine; a violated invariant is not.
"""

from __future__ import annotations

import pytest

from tests.scenarios.cells import Cell
from tests.scenarios.judging import check_cell
from tests.scenarios.matrix import ISSUE_3_CELLS, applicable
from tests.scenarios.stage import Stage

# Cells whose scenario shows a protocol bug in the services: the test keeps
# asserting the correct outcome and is expected to fail until the fix.
KNOWN_BUGS: dict[str, str] = {}


def _param(cell: Cell) -> object:
    marks = []
    if cell.name in KNOWN_BUGS:
        marks.append(pytest.mark.xfail(strict=True, reason=f"BUG: {KNOWN_BUGS[cell.name]}"))
    return pytest.param(cell, id=cell.name, marks=marks)


MATRIX = [_param(cell) for cell in applicable() if cell.name not in ISSUE_3_CELLS]


@pytest.mark.parametrize("cell", MATRIX)
def test_fault_in_phase_ends_in_a_legal_outcome_and_the_oracle_passes(
    stage: Stage, cell: Cell
) -> None:
    """§8 + the cell's rules (matrix.py `pins`): a legal outcome, no oracle violation."""
    check_cell(stage, cell)
