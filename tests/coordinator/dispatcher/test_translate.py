"""Runner replies -> core values (dispatcher/translate.py): numbers the coordinator
does not know, as a newer or hostile runner may send them, never escape as a bare
ValueError from the generated enum wrapper."""

from __future__ import annotations

import pytest

from coordinator_svc.core.model import Execution, StopReason
from coordinator_svc.core.runner_view import RunnerOpState, observe
from coordinator_svc.dispatcher.translate import (
    RunnerContractViolation,
    envelope_executor,
    runner_executors,
    runner_op,
)
from turnwire.common.v1 import turn_pb2
from turnwire.runner.v1 import runner_pb2

UNKNOWN_NUMBER = 99


def row(**fields: object) -> runner_pb2.RunnerOperation:
    values: dict[str, object] = {
        "operation_id": "op-1",
        "state": runner_pb2.RUNNER_OPERATION_STATE_RUNNING,
        "execution": turn_pb2.EXECUTION_STARTED,
        "incarnation_id": "inc-1",
    }
    values.update(fields)
    return runner_pb2.RunnerOperation(**values)  # type: ignore[arg-type]


@pytest.mark.rule("C9")
def test_a_row_state_the_coordinator_does_not_know_is_a_contract_violation() -> None:
    """C9: a row with no state the contract names is the runner breaking it, answered
    as such (RunnerContractViolation), for UNSPECIFIED and for a number unknown here."""
    for number in (runner_pb2.RUNNER_OPERATION_STATE_UNSPECIFIED, UNKNOWN_NUMBER):
        with pytest.raises(RunnerContractViolation):
            runner_op(row(state=number))


@pytest.mark.rule("C14", "R3")
def test_an_execution_the_coordinator_does_not_know_is_no_evidence_of_one() -> None:
    """C14/R3: an execution number unknown here proves nothing either way: the row reads
    as saying nothing (None), which observe() turns into UNKNOWN, never NOT_STARTED."""
    op = runner_op(row(execution=UNKNOWN_NUMBER))
    assert op.execution is None
    assert op.state is RunnerOpState.RUNNING
    assert observe(op).execution is Execution.UNKNOWN


@pytest.mark.rule("C11")
def test_a_stop_reason_the_coordinator_does_not_know_is_none() -> None:
    """C11: only a stop reason the contract names is recorded."""
    assert runner_op(row(stop_reason=UNKNOWN_NUMBER)).stop_reason is None
    assert runner_op(row(stop_reason=turn_pb2.STOP_REASON_CANCEL)).stop_reason is StopReason.CANCEL


@pytest.mark.rule("C6b", "R14")
def test_executor_names_from_the_wire() -> None:
    """C6b: GetRunnerInfo's executors by name, sorted; none named is "not said" (a
    runner from before R14), never "serves nothing"; an envelope's empty executor
    is ``default``."""
    said = [
        runner_pb2.ExecutorInfo(name="words", kind="python"),
        runner_pb2.ExecutorInfo(name="default", kind="echo"),
    ]
    assert runner_executors(said) == ("default", "words")
    assert runner_executors([]) is None
    named = runner_pb2.TurnEnvelope(operation_id="op", executor="words").SerializeToString()
    assert envelope_executor(named) == "words"
    assert envelope_executor(runner_pb2.TurnEnvelope(operation_id="op").SerializeToString()) == (
        "default"
    )
