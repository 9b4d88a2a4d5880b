"""The coordinator journals the runner's execution records (PROTOCOL.md R15).

Pure: the records are bytes to the core (a serialized ExecutionLog); it writes
them on the terminal commit, on writes it makes anyway, and on a write of its
own only when a retry began (more records than the journal holds).
"""

from __future__ import annotations

import pytest

from coordinator_svc.core.decide import decide
from coordinator_svc.core.events import RunnerReported
from coordinator_svc.core.model import AttemptOutcome, Execution, OpState
from coordinator_svc.core.runner_view import RunnerOpState as R
from tests.coordinator.core.scenario import INC_A, RUNNER, answer, attempt, bound, ctx, row, step

ACCEPTED_1 = attempt(1, AttemptOutcome.ACCEPTED)
ONE = b"one execution"
TWO = b"two executions"


@pytest.mark.rule("R15")
def test_the_terminal_commit_stores_the_settled_rows_records() -> None:
    """R15: SUCCEEDED after a retry: the journal keeps the row's two records."""
    done = row(R.SUCCEEDED, Execution.STARTED, result=b"r", executions=TWO, execution_count=2)
    running = bound(OpState.RUNNING, execution=Execution.STARTED, executions=ONE, execution_count=1)
    record, _ = step(running, RunnerReported(RUNNER, INC_A, done), ctx(ACCEPTED_1))
    assert record.state is OpState.SUCCEEDED
    assert (record.executions, record.execution_count) == (TWO, 2)


@pytest.mark.rule("R15")
def test_a_retry_that_began_is_written_on_its_own() -> None:
    """R15: a watch report of a running row with more records than journaled is
    written (no event, no state change), so a client sees the retry while it runs."""
    running = bound(OpState.RUNNING, execution=Execution.STARTED, executions=ONE, execution_count=1)
    retrying = row(R.RUNNING, Execution.STARTED, executions=TWO, execution_count=2)
    record, decision = step(running, RunnerReported(RUNNER, INC_A, retrying), ctx(ACCEPTED_1))
    assert decision.change is not None and decision.change.event is None
    assert (record.state, record.executions, record.execution_count) == (OpState.RUNNING, TWO, 2)


@pytest.mark.rule("R15")
def test_records_that_changed_without_a_new_execution_wait_for_a_write() -> None:
    """R15: the same count with other bytes (an execution's end, its start) costs no
    commit of its own; it rides on the next status poll's write."""
    running = bound(OpState.RUNNING, execution=Execution.STARTED, executions=ONE, execution_count=1)
    ended = row(R.RUNNING, Execution.STARTED, executions=b"one, ended", execution_count=1)
    assert decide(running, RunnerReported(RUNNER, INC_A, ended), ctx(ACCEPTED_1)).change is None
    record, _ = step(running, answer(ended), ctx(ACCEPTED_1))
    assert record.executions == b"one, ended"


@pytest.mark.rule("R15", "C11")
def test_a_cancelling_turn_still_running_records_new_records_on_its_poll() -> None:
    """R15, C11: regression (found by the simulation: a KeyError when the row's records
    changed but no new start did): the CANCELLING poll's write carries the records."""
    cancelling = bound(
        OpState.CANCELLING,
        execution=Execution.STARTED,
        cancel_requested=True,
        executions=ONE,
        execution_count=1,
    )
    still = row(R.RUNNING, Execution.STARTED, executions=TWO, execution_count=2)
    record, decision = step(cancelling, answer(still), ctx(ACCEPTED_1))
    assert record.state is OpState.CANCELLING and record.executions == TWO
    assert decision.commands  # the Cancel is asked again
