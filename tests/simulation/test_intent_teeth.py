"""Teeth for the admission written with its launch intent (R3, R4, §6; issue 27).

The real cores pass the CI budget (test_budget). Each breakage here is a
mistake the merged commit invites, and the checker must catch it:

- the admission's write loses its intent while the job still starts as if it
  held one (a shell that passes the decision to the job but not to the row):
  an executor starts on a row that says "accepted, never launched";
- a later incarnation reads a row launched by its admission whose start was
  never confirmed as "accepted, never launched" and takes it over (the
  tempting shortcut: nothing confirmed its start, so nothing ran). The start
  confirmation is queued behind the store's writer, never awaited, so an
  executor may well have run: the turn runs twice.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from runner_svc.core import admission
from runner_svc.core.model import Execution, OperationRow, RowState
from runner_svc.core.settlement import reported_row
from runner_svc.core.transitions import RowEvent, TakeOver
from runner_svc.core.witness import StoreOpening, vouches
from tests.simulation import sim_runner
from tests.simulation.budget import run_budget
from tests.simulation.simulator import SimConfig, run_seed

SEEDS = range(3000)
CONFIG = SimConfig(steps=70, trace=False)


@pytest.mark.rule("R3")
def test_a_runner_that_starts_without_its_admissions_intent_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R3: the row's write lost the intent the job was told it carries: the executor
    starts with none on the row."""
    change = sim_runner.admission_change

    def without_intent(*args: object, **kwargs: object) -> RowEvent:
        return change(*args, **{**kwargs, "with_intent": False})  # type: ignore[arg-type]

    monkeypatch.setattr(sim_runner, "admission_change", without_intent)
    result = run_budget(SEEDS, CONFIG, stop_on_violation=True)
    assert result.violations, f"survived {result.schedules} schedules"
    seed, violation = result.violations[0]
    assert violation.startswith("[R3 intent]"), violation
    print(f"starts without the admission's intent: caught at seed {seed}: {violation}")


@pytest.mark.rule("R3", "C14")
def test_reading_an_unconfirmed_admission_intent_as_never_launched_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R3/§6: an earlier incarnation's row launched by its admission, start not
    confirmed, shown as accepted and taken over: the turn runs twice (or its status
    lies)."""
    takes_over = admission._needs_take_over

    def unconfirmed(row: OperationRow, incarnation_id: str) -> bool:
        first = row.executions[0] if len(row.executions) == 1 else None
        return (
            row.state is RowState.LAUNCHING
            and row.incarnation_id != incarnation_id
            and first is not None
            and first.execution is not Execution.STARTED
        )

    def broken_take_over(
        row: OperationRow, incarnation_id: str, openings: tuple[StoreOpening, ...]
    ) -> bool:
        if unconfirmed(row, incarnation_id) and row.stop_reason is None:
            return vouches(openings, row.incarnation_id, row.dispatch_stamp)
        return takes_over(row, incarnation_id, openings)

    def broken_report(row: OperationRow, incarnation_id: str) -> OperationRow:
        if unconfirmed(row, incarnation_id):
            return replace(row, state=RowState.ACCEPTED, execution=Execution.NOT_STARTED)
        return reported_row(row, incarnation_id)

    monkeypatch.setattr(admission, "_needs_take_over", broken_take_over)
    monkeypatch.setattr(sim_runner, "reported_row", broken_report)
    # The take-over itself must be allowed by the row table for the harm to show.
    monkeypatch.setattr(sim_runner.SimStore, "write", _taking_launched_rows(sim_runner.SimStore))
    config = replace(CONFIG, check_proofs=False)
    # The ledger's harm is the point (the broken report also leaves turns stuck,
    # which the checker names first in more seeds): the first double start.
    harm = next(
        (
            (seed, run.violation)
            for seed in SEEDS
            if (run := run_seed(seed, config)).violation
            and run.violation.startswith(("[1 at most once]", "[3 execution]"))
        ),
        None,
    )
    assert harm is not None, f"no turn ran twice or lied in {len(SEEDS)} schedules"
    print(f"an unconfirmed admission intent read as never launched: seed {harm[0]}: {harm[1]}")


def _taking_launched_rows(store_class: type[sim_runner.SimStore]) -> object:
    """SimStore.write that lets a take-over have a launched row, as if it were accepted
    (the row table refuses it otherwise: defence in depth would hide the broken rule)."""
    write = store_class.write

    def broken(self: sim_runner.SimStore, operation_id: str, change: RowEvent) -> OperationRow:
        current = self.rows.get(operation_id)
        if isinstance(change, TakeOver) and current and current.state is RowState.LAUNCHING:
            self.rows[operation_id] = replace(
                current, state=RowState.ACCEPTED, execution=Execution.NOT_STARTED, executions=()
            )
        return write(self, operation_id, change)

    return broken
