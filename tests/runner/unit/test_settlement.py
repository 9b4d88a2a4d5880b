"""Stop reasons (R6), launch checks (R3), settlement (R7) and restart reports (§6)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runner_svc.core.model import Execution, OperationRow, RowState, SlotKind, StopReason
from runner_svc.core.settlement import (
    ReportedOutcome,
    decide_settlement,
    due_stop_reason,
    first_stop_reason,
    launch_block,
    reported_row,
    unlaunched_settlement,
)

REASONS = frozenset({"EXECUTOR_FAILED", "CANCELLED", "RESULT_INVALID"})
OURS, OLD = "a" * 32, "b" * 32
OK = ReportedOutcome(succeeded=True, output=b"out", content_type="text/plain")
FAILED = ReportedOutcome(succeeded=False, error_reason="CANCELLED")

# (stop reason, outcome, expected state, expected error reason or None)
SETTLEMENTS = [
    (None, OK, RowState.SUCCEEDED, None),
    (StopReason.CANCEL, OK, RowState.SUCCEEDED, None),  # finished first (C11)
    (None, ReportedOutcome(succeeded=False), RowState.FAILED, "EXECUTOR_FAILED"),
    (
        None,
        ReportedOutcome(succeeded=False, error_reason="CANCELLED"),
        RowState.FAILED,
        "CANCELLED",
    ),
    (StopReason.CANCEL, FAILED, RowState.CANCELLED, "CANCELLED"),
    (StopReason.DEADLINE, FAILED, RowState.TIMED_OUT, "DEADLINE_EXCEEDED"),
    (StopReason.BUDGET, FAILED, RowState.TIMED_OUT, "BUDGET_EXHAUSTED"),
    (StopReason.SHUTDOWN, FAILED, RowState.CANCELLED, "SHUTDOWN"),
    (None, ReportedOutcome(succeeded="yes"), RowState.FAILED, "RESULT_INVALID"),
    (None, ReportedOutcome(succeeded=True, output="text"), RowState.FAILED, "RESULT_INVALID"),
    (None, ReportedOutcome(succeeded=True, metadata={"k": 1}), RowState.FAILED, "RESULT_INVALID"),
    (
        None,
        ReportedOutcome(succeeded=False, error_reason="MADE_UP"),
        RowState.FAILED,
        "RESULT_INVALID",
    ),
    (StopReason.CANCEL, ReportedOutcome(succeeded=None), RowState.FAILED, "RESULT_INVALID"),
]


@pytest.mark.rule("R7")
@pytest.mark.parametrize(("stop", "outcome", "state", "reason"), SETTLEMENTS)
def test_settlement_table(
    stop: StopReason | None, outcome: ReportedOutcome, state: RowState, reason: str | None
) -> None:
    """R7: the terminal state comes from the first stop reason and the validated outcome."""
    decision = decide_settlement(stop, outcome, REASONS)
    assert decision.state is state
    assert (decision.error.reason if decision.error else None) == reason
    assert (decision.result is not None) == (state is RowState.SUCCEEDED)


@pytest.mark.rule("R6")
@pytest.mark.parametrize(
    ("current", "new", "kept"),
    [
        (None, StopReason.CANCEL, StopReason.CANCEL),
        (StopReason.DEADLINE, StopReason.CANCEL, StopReason.DEADLINE),
        (StopReason.CANCEL, StopReason.SHUTDOWN, StopReason.CANCEL),
        (StopReason.SHUTDOWN, StopReason.BUDGET, StopReason.SHUTDOWN),
    ],
)
def test_first_stop_reason_wins(
    current: StopReason | None, new: StopReason, kept: StopReason
) -> None:
    """R6: the first stop reason is kept; later ones never overwrite it."""
    assert first_stop_reason(current, new) is kept


@pytest.mark.rule("R8", "C14")
def test_unlaunched_settlements_match_their_reason() -> None:
    """R8/C14: a row stopped before launch ends CANCELLED or TIMED_OUT by its reason."""
    assert unlaunched_settlement(StopReason.CANCEL).state is RowState.CANCELLED
    assert unlaunched_settlement(StopReason.DEADLINE).state is RowState.TIMED_OUT
    assert unlaunched_settlement(StopReason.SHUTDOWN).error.reason == "SHUTDOWN"  # type: ignore[union-attr]


@pytest.mark.rule("R6")
@pytest.mark.parametrize(
    ("now", "deadline", "started", "budget", "due"),
    [
        (10.0, None, None, None, None),
        (10.0, 10.0, None, None, StopReason.DEADLINE),
        (9.0, 10.0, 5.0, 5.0, None),
        (10.5, None, 5.0, 5.0, StopReason.BUDGET),
        (11.0, 11.0, 5.0, 1.0, StopReason.DEADLINE),
        (10.0, None, None, 1.0, None),  # budget counts run time only
    ],
)
def test_due_stop_reason(
    now: float,
    deadline: float | None,
    started: float | None,
    budget: float | None,
    due: StopReason | None,
) -> None:
    """R6: deadline is wall-clock, budget is run time since the confirmed start."""
    assert (
        due_stop_reason(now=now, deadline=deadline, started_at=started, budget_seconds=budget)
        is due
    )


def row(state: RowState, incarnation: str = OURS, **changes: object) -> OperationRow:
    base = OperationRow("op", state, Execution.NOT_STARTED, incarnation, 1, kind=SlotKind.WRITABLE)
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.rule("R3")
@pytest.mark.parametrize(
    ("found", "stop", "blocked"),
    [
        (row(RowState.ACCEPTED), None, False),
        (None, None, True),
        (row(RowState.CANCELLED), None, True),
        (row(RowState.ACCEPTED, OLD), None, True),
        (row(RowState.ACCEPTED), StopReason.CANCEL, True),
        (row(RowState.ACCEPTED, stop_reason=StopReason.SHUTDOWN), None, True),
    ],
)
def test_launch_check(found: OperationRow | None, stop: StopReason | None, blocked: bool) -> None:
    """R3: launch only a row still ACCEPTED by this incarnation with no stop reason."""
    assert bool(launch_block(found, OURS, stop)) is blocked


@pytest.mark.rule("R3")
@pytest.mark.parametrize(
    ("stored", "state", "execution"),
    [
        (row(RowState.RUNNING, OLD), RowState.INTERRUPTED, Execution.STARTED),
        (row(RowState.LAUNCHING, OLD), RowState.INTERRUPTED, Execution.UNKNOWN),
        (row(RowState.ACCEPTED, OLD), RowState.ACCEPTED, Execution.NOT_STARTED),
        (
            row(RowState.RUNNING, OURS, execution=Execution.STARTED),
            RowState.RUNNING,
            Execution.STARTED,
        ),
        (
            row(RowState.SUCCEEDED, OLD, execution=Execution.STARTED),
            RowState.SUCCEEDED,
            Execution.STARTED,
        ),
    ],
)
def test_restart_report(stored: OperationRow, state: RowState, execution: Execution) -> None:
    """R3/§6: an earlier incarnation's in-flight row reads INTERRUPTED; its writer is kept."""
    shown = reported_row(stored, OURS)
    assert (shown.state, shown.execution) == (state, execution)
    assert shown.incarnation_id == stored.incarnation_id
