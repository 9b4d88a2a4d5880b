"""What Cancel, Release and an admitted Dispatch write (runner_svc.core.requests):
the rules the service and the simulation's runner both run (R2, R5, R6, R9, §5)."""

from __future__ import annotations

import pytest

from runner_svc.core.model import Execution, Refusal, RowState, RunnerRefusal, StopReason
from runner_svc.core.requests import admission_change, plan_cancel, plan_release
from runner_svc.core.transitions import (
    Admit,
    RaiseFencingToken,
    Release,
    Settle,
    TakeOver,
    Tombstone,
)
from tests.runner.unit.test_admission import FACTS, OLD, OURS, stored


def _cancel(row: object, *, token: int = 5, has_job: bool = False):  # type: ignore[no-untyped-def]
    return plan_cancel(
        row,  # type: ignore[arg-type]
        operation_id="op",
        token=token,
        incarnation_id=OURS,
        has_job=has_job,
        now=7.0,
    )


@pytest.mark.rule("R5", "C8b")
def test_cancel_of_an_unknown_id_tombstones_it() -> None:
    """R5: the tombstone proves no Dispatch for it ever runs here (C8b)."""
    plan = _cancel(None, token=3)
    assert plan.writes == (Tombstone("op", OURS, 3, 7.0),)
    assert (plan.tell_job, plan.outcome) == (False, "tombstoned")


def test_cancel_with_a_lower_token_is_refused_and_writes_nothing() -> None:
    """§5: no runner accepts a token lower than the highest it has seen."""
    with pytest.raises(RunnerRefusal) as refused:
        _cancel(stored(RowState.RUNNING), token=4)
    assert refused.value.refusal is Refusal.STALE_FENCING_TOKEN


@pytest.mark.rule("R6")
def test_a_higher_token_is_recorded_before_the_job_is_told() -> None:
    """§5, R6: the job of ours stops itself; the token is written first."""
    plan = _cancel(stored(RowState.RUNNING), token=9, has_job=True)
    assert plan.writes == (RaiseFencingToken(9),)
    assert (plan.tell_job, plan.outcome) == (True, "asked_to_stop")


@pytest.mark.rule("R6")
def test_an_earlier_incarnations_unlaunched_row_settles_not_started() -> None:
    """R6, §6: accepted by an earlier incarnation and never taken over: it cannot have
    started here, so it settles CANCELLED, NOT_STARTED, with the first stop reason."""
    plan = _cancel(stored(RowState.ACCEPTED, OLD, stop_reason=StopReason.SHUTDOWN))
    (settle,) = plan.writes
    assert isinstance(settle, Settle) and settle.execution is Execution.NOT_STARTED
    assert (plan.tell_job, plan.outcome) == (False, "settled_unlaunched")


@pytest.mark.rule("R6")
def test_an_earlier_incarnations_launch_and_a_settled_row_are_left_alone() -> None:
    """R6: nothing here can stop an earlier incarnation's launch; a settled row stays."""
    assert _cancel(stored(RowState.RUNNING, OLD)).writes == ()
    assert _cancel(stored(RowState.SUCCEEDED)).outcome == "settled"


@pytest.mark.rule("R9")
def test_release_answers_and_writes_only_for_a_settled_row() -> None:
    """R9: a settled row drops its result once; unknown, live or tombstoned: False."""
    assert plan_release(stored(RowState.SUCCEEDED), 5) == (True, Release())
    assert plan_release(stored(RowState.SUCCEEDED, released=True), 5) == (True, None)
    assert plan_release(stored(RowState.RUNNING), 5) == (False, None)
    assert plan_release(stored(RowState.TOMBSTONED), 5) == (False, None)
    assert plan_release(None, 5) == (False, None)


@pytest.mark.rule("R2")
def test_admission_writes_a_new_row_or_takes_the_old_one_over() -> None:
    """R2, §6: a new id is admitted; an earlier incarnation's row is taken over."""
    fresh = admission_change(FACTS, None, incarnation_id=OURS, attempt=2, dispatch_stamp=9, now=1.0)
    assert isinstance(fresh, Admit) and fresh.fencing_token == 5
    taken = admission_change(
        FACTS,
        stored(RowState.ACCEPTED, OLD),
        incarnation_id=OURS,
        attempt=2,
        dispatch_stamp=9,
        now=1.0,
    )
    assert taken == TakeOver(OURS, 2, 5, 1.0, 9)
