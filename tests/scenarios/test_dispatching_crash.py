"""Issue #3 on real processes: the coordinator SIGKILLed while DISPATCHING, restarted."""

from __future__ import annotations

import pytest

from tests.scenarios.judging import check_cell
from tests.scenarios.matrix import CELLS
from tests.scenarios.stage import Stage

_BY_NAME = {cell.name: cell for cell in CELLS}


@pytest.mark.rule("C4", "C12", "C8")
def test_sigkill_after_attempt_commit_replays_once_after_proving_absence(stage: Stage) -> None:
    """C4/C12/C8: killed before the send, restarted: exact replay, at most one execution."""
    check_cell(stage, _BY_NAME["coordinator_sigkill-before_send"])


@pytest.mark.rule("C7", "C12", "C8")
def test_sigkill_after_dispatch_send_adopts_the_runner_row_without_resend(stage: Stage) -> None:
    """C7/C12/C8: killed after the runner accepted, restarted: reconciled, one execution."""
    check_cell(stage, _BY_NAME["coordinator_sigkill-after_commit"])
