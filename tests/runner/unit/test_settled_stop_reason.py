"""R6/R7: a settled row reports the stop reason that stopped the turn (settle decides).

The first stop reason is recorded while the turn runs (R6); once it settles, a
turn that finished on its own (SUCCEEDED) reports none, even if a cancel or a
drain had asked it to stop: the stop did not stop anything.
"""

from __future__ import annotations

import pytest

from runner_svc.core.model import Execution, OperationRow, RowState, StopReason, TurnFailure
from runner_svc.core.transitions import RecordStopReason, Settle, apply
from tests.runner.unit.test_row_transitions import OK, OURS, row

S = RowState


@pytest.mark.parametrize("reason", list(StopReason))
def test_success_after_a_stop_request_reports_no_stop_reason(reason: StopReason) -> None:
    """A cancel that lost the race, a drain the turn outlived: SUCCEEDED, no stop reason."""
    running = apply(row(S.RUNNING), RecordStopReason(reason), "op")
    assert running.stop_reason is reason  # recorded while it runs (R6)
    done = apply(running, Settle(OURS, S.SUCCEEDED, Execution.STARTED, 9.0, result=OK), "op")
    assert done.state is S.SUCCEEDED and done.stop_reason is None


@pytest.mark.parametrize(
    ("reason", "state", "error"),
    [
        (StopReason.CANCEL, S.CANCELLED, "CANCELLED"),
        (StopReason.SHUTDOWN, S.CANCELLED, "SHUTDOWN"),
        (StopReason.DEADLINE, S.TIMED_OUT, "DEADLINE_EXCEEDED"),
        (StopReason.BUDGET, S.TIMED_OUT, "BUDGET_EXHAUSTED"),
    ],
)
def test_stop_that_ended_the_turn_is_the_reported_reason(
    reason: StopReason, state: RowState, error: str
) -> None:
    running = apply(row(S.RUNNING), RecordStopReason(reason), "op")
    settle = Settle(OURS, state, Execution.STARTED, 9.0, error=TurnFailure(error))
    assert apply(running, settle, "op").stop_reason is reason


def test_never_launched_row_stopped_before_launch_keeps_its_reason() -> None:
    accepted: OperationRow = apply(row(S.ACCEPTED), RecordStopReason(StopReason.CANCEL), "op")
    settle = Settle(OURS, S.CANCELLED, Execution.NOT_STARTED, 9.0, error=TurnFailure("CANCELLED"))
    assert apply(accepted, settle, "op").stop_reason is StopReason.CANCEL
