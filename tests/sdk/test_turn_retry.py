"""The SDK's retry policy value (R15): what a client submits and reads back."""

from __future__ import annotations

import pytest

from turnwire.client import Operation, Turn, TurnRetry
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2


@pytest.mark.rule("R15")
def test_a_turn_built_with_retry_carries_the_policy_on_the_wire() -> None:
    """R15: retry= becomes Turn.retry_policy, field by field; without it none is set."""
    policy = TurnRetry(max_retries=3, initial_backoff=0.25, max_backoff=8.0, multiplier=3.0)
    wire = Turn.build(items=["hi"], retry=policy).to_proto()
    assert wire.HasField("retry_policy")
    assert wire.retry_policy.max_retries == 3
    assert wire.retry_policy.initial_backoff.ToNanoseconds() == 250_000_000
    assert wire.retry_policy.max_backoff.seconds == 8
    assert wire.retry_policy.backoff_multiplier == 3.0
    assert TurnRetry.from_proto(wire.retry_policy) == policy
    assert not Turn.build(items=["hi"]).to_proto().HasField("retry_policy")


@pytest.mark.rule("R15")
def test_an_operation_reads_its_executions_and_which_one_made_the_result() -> None:
    """R15: execution_count, each record's outcome and declared effect, result_execution."""
    message = coordinator_pb2.Operation(
        operation_id="op_1",
        execution_count=2,
        result_execution=2,
        executions=[
            turn_pb2.ExecutionRecord(
                number=1,
                execution=turn_pb2.EXECUTION_STARTED,
                outcome=turn_pb2.EXECUTION_OUTCOME_FAILED,
                reason="EXECUTOR_FAILED",
                effect=turn_pb2.DECLARED_EFFECT_NONE,
            ),
            turn_pb2.ExecutionRecord(
                number=2,
                execution=turn_pb2.EXECUTION_STARTED,
                outcome=turn_pb2.EXECUTION_OUTCOME_SUCCEEDED,
                retry_reason="execution 1 failed EXECUTOR_FAILED, effect NONE; waited 1 s",
            ),
        ],
    )
    operation = Operation.from_proto(message)
    first, second = operation.executions
    assert operation.execution_count == 2 and operation.result_execution == 2
    assert (first.outcome.value, first.effect and first.effect.value) == ("FAILED", "NONE")
    assert (second.outcome.value, second.effect, second.execution) == ("SUCCEEDED", None, "STARTED")
    assert operation.retry is None
