"""R15 through a real coordinator and a real runner (processes, gRPC on 127.0.0.1,
SQLite journal and store): what is retried, what is not, what the Operation shows.

One deployment for the module (LocalDeployment, its processes ended by PID);
the executor is tests/retries/functions.py:scripted, steered per turn by its
parameters. Every wait is bounded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnwire.client import (
    AdminClient,
    ExecutionOutcome,
    FixTheRequest,
    Operation,
    OperationState,
    TurnRetry,
    TurnwireClient,
)
from turnwire.deployment import LocalDeployment
from turnwire.vocabulary import DeclaredEffect

FAST = TurnRetry(max_retries=2, initial_backoff=0.05, max_backoff=0.2)
WAIT = 60.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TurnwireClient, Path]]:
    data = tmp_path_factory.mktemp("retries")
    deployment = LocalDeployment(
        data / "deploy",
        runner_count=1,
        executor="python:tests.retries.functions:scripted",
        coordinator_args=("--idle-poll", "0.05", "--status-poll", "1.0"),
        with_admin_token=True,
    )
    deployment.start()
    try:
        with TurnwireClient(deployment.address, token=deployment.token) as client:
            ADMIN[:] = [deployment.address, deployment.admin_token]
            yield client, data
    finally:
        deployment.stop()


# The admin endpoint of the module's deployment (address, admin token), set by ``stack``.
ADMIN: list[str] = []


def _run(
    stack: tuple[TurnwireClient, Path], name: str, retry: TurnRetry | None, **parameters: str
) -> tuple[Operation, list[str]]:
    """Submit, wait for the terminal state; the operation and the executions' log lines."""
    client, data = stack
    log = data / f"{name}.log"
    final = client.submit_and_wait(
        items=["hi"], parameters={"log": str(log), **parameters}, retry=retry, timeout=WAIT
    )
    return final, log.read_text().splitlines() if log.exists() else []


@pytest.mark.rule("R15")
def test_a_failure_declared_none_is_retried_under_the_same_operation_id(
    stack: tuple[TurnwireClient, Path],
) -> None:
    """R15: RetryableNoEffect on execution 1, then success: SUCCEEDED, two executions,
    the first FAILED with effect NONE, the result from execution 2, ctx.operation_id
    the same both times and ctx.attempt the execution number."""
    final, lines = _run(stack, "flaky", FAST, mode="flaky")
    assert final.state is OperationState.SUCCEEDED, final
    assert final.execution_count == 2 and final.result_execution == 2
    first, second = final.executions
    assert (first.number, first.outcome, first.effect) == (
        1,
        ExecutionOutcome.FAILED,
        DeclaredEffect.NONE,
    )
    assert (second.number, second.outcome) == (2, ExecutionOutcome.SUCCEEDED)
    assert "effect NONE" in second.retry_reason
    assert first.ended_at is not None and second.started_at is not None
    assert first.ended_at <= second.started_at  # never overlapping
    assert lines == [f"{final.operation_id} 1", f"{final.operation_id} 2"]
    assert final.result is not None and final.result.output == b"done on execution 2"
    assert final.retry == FAST
    # The operator's audit shows the same executions (DescribeOperation's evidence).
    address, token = ADMIN
    with AdminClient(address, token=token) as admin:
        audited = admin.describe(final.operation_id).operation.operation
    assert audited.executions == final.executions and audited.execution_count == 2


@pytest.mark.rule("R15")
@pytest.mark.parametrize(
    ("mode", "effect"), [("applied", DeclaredEffect.APPLIED), ("undeclared", None)]
)
def test_a_failure_not_declared_none_is_final(
    stack: tuple[TurnwireClient, Path], mode: str, effect: DeclaredEffect | None
) -> None:
    """R15: FailedAfterEffect or an undeclared exception: FAILED after one execution,
    never retried, whatever the policy allows."""
    final, lines = _run(stack, mode, FAST, mode=mode)
    assert final.state is OperationState.FAILED
    assert final.execution_count == 1 and len(lines) == 1
    (only,) = final.executions
    assert (only.outcome, only.effect) == (ExecutionOutcome.FAILED, effect)
    assert final.result_execution == 1


@pytest.mark.rule("R15")
def test_exhausted_retries_fail_with_every_execution_recorded(
    stack: tuple[TurnwireClient, Path],
) -> None:
    """R15: at most 1 + max_retries executions; each failure is on the Operation."""
    final, lines = _run(stack, "exhausted", FAST, mode="none")
    assert final.state is OperationState.FAILED
    assert final.execution_count == 3 == len(lines)
    assert [e.number for e in final.executions] == [1, 2, 3]
    assert all(e.effect is DeclaredEffect.NONE for e in final.executions)
    assert final.result_execution == 3 and final.error is not None


@pytest.mark.rule("R15")
def test_without_a_policy_a_none_failure_runs_once(stack: tuple[TurnwireClient, Path]) -> None:
    """R15: no retry policy is today's behaviour: one execution, FAILED."""
    final, lines = _run(stack, "no-policy", None, mode="none")
    assert final.state is OperationState.FAILED
    assert final.execution_count == 1 == len(lines) and final.retry is None


@pytest.mark.rule("R15")
def test_a_cancel_during_the_backoff_ends_cancelled_with_no_further_execution(
    stack: tuple[TurnwireClient, Path],
) -> None:
    """R15: the execution failed (NONE), the runner waits 30 s; a cancel then ends the
    turn CANCELLED, and no second execution ever starts."""
    client, data = stack
    log = data / "cancel.log"
    slow = TurnRetry(max_retries=3, initial_backoff=30.0, max_backoff=30.0)
    submitted = client.submit(
        items=["hi"], parameters={"log": str(log), "mode": "none"}, retry=slow
    )
    op_id = submitted.operation.operation_id
    deadline = time.monotonic() + WAIT
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.exists(), "the first execution never ran"
    time.sleep(0.5)  # its failure and end are written at once; the wait is 30 s
    client.cancel(op_id)
    final = client.wait(op_id, timeout=WAIT)
    assert final.state is OperationState.CANCELLED, final
    (only,) = final.executions
    assert (only.outcome, only.effect) == (ExecutionOutcome.FAILED, DeclaredEffect.NONE)
    assert final.result_execution == 0
    time.sleep(0.3)
    assert log.read_text().splitlines() == [f"{op_id} 1"]


@pytest.mark.rule("R15")
@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (TurnRetry(max_retries=11), "turn.retry_policy.max_retries"),
        (
            TurnRetry(max_retries=1, initial_backoff=5.0, max_backoff=1.0),
            "turn.retry_policy.max_backoff",
        ),
        (TurnRetry(max_retries=1, multiplier=0.5), "turn.retry_policy.backoff_multiplier"),
    ],
)
def test_a_policy_out_of_bounds_is_refused_naming_the_field(
    stack: tuple[TurnwireClient, Path], policy: TurnRetry, field: str
) -> None:
    """R15: checked at submit: INVALID_ARGUMENT / TURN_INVALID naming the field."""
    client, _ = stack
    with pytest.raises(FixTheRequest) as refused:
        client.submit(items=["hi"], retry=policy, idempotency_key=f"bad-{field}")
    assert refused.value.reason == "TURN_INVALID"
    assert field in str(refused.value)
