"""C6b: a turn goes only to a runner serving its executor, and is refused at
submit when it is proven that none does (real coordinator, real runners,
real SQLite journal and stores, real gRPC on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import turnwire.cli as cli
from tests.sdk.executor_stack import ExecutorStack
from tests.sdk.live_stack import TOKEN
from turnwire.client import NoRunnerAvailable, OperationState, TurnwireClient

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecutorStack]:
    plan = {"r1": ("alpha=echo", "shared=echo"), "r2": ("beta=echo", "shared=echo")}
    with ExecutorStack(tmp_path_factory.mktemp("executors"), plan) as live:
        yield live


@pytest.fixture
def client(stack: ExecutorStack) -> Iterator[TurnwireClient]:
    with TurnwireClient(stack.address, TOKEN) as made:
        yield made


def _every_operation(client: TurnwireClient) -> list[str]:
    return [op.operation_id for page in client.list(page_size=100) for op in page.operations]


def _ran(client: TurnwireClient, executor: str) -> None:
    """One turn for ``executor``, waited to SUCCEEDED (its runner has answered)."""
    made = client.submit(items=["warm"], executor=executor)
    assert client.wait(made.operation.operation_id, timeout=30).state is OperationState.SUCCEEDED


@pytest.mark.rule("C6b")
def test_each_turn_is_bound_only_to_a_runner_serving_its_executor(
    client: TurnwireClient,
) -> None:
    """C6b: alpha turns go to r1, beta turns to r2 (the only runners serving them),
    each on its first attempt, whatever the load; a turn for an executor both
    serve may go to either."""
    submitted = [
        (executor, client.submit(items=[f"{executor}-{n}"], executor=executor))
        for n in range(4)
        for executor in ("alpha", "beta", "shared")
    ]
    serving = {"alpha": {"r1"}, "beta": {"r2"}, "shared": {"r1", "r2"}}
    for executor, submission in submitted:
        done = client.wait(submission.operation.operation_id, timeout=30)
        assert done.state is OperationState.SUCCEEDED, done
        assert done.runner in serving[executor], (executor, done.runner)
        # Sent there first: no attempt was refused EXECUTOR_NOT_SERVED elsewhere (R14).
        assert done.attempt_count == 1, (executor, done.attempt_count)
        assert done.result is not None and done.result.output.startswith(executor.encode())


@pytest.mark.rule("C6b")
def test_submit_and_wait_takes_the_executor_too(client: TurnwireClient) -> None:
    """C6b through SubmitAndWatch: ``executor=`` on submit_and_wait routes the same way."""
    done = client.submit_and_wait(items=["one call"], executor="beta", timeout=30)
    assert done.state is OperationState.SUCCEEDED and done.runner == "r2"
    with pytest.raises(NoRunnerAvailable) as refused:
        _ran(client, "alpha")
        client.submit_and_wait(items=["x"], executor="gamma", timeout=30)
    assert refused.value.reason == "NO_RUNNER_FOR_EXECUTOR"


@pytest.mark.rule("C6b")
def test_an_executor_no_runner_serves_is_refused_at_submit_and_nothing_is_stored(
    client: TurnwireClient,
) -> None:
    """C6b: once every runner has said what it serves, a turn for another executor
    is FAILED_PRECONDITION / NO_RUNNER_FOR_EXECUTOR naming the executor and what is
    served; no operation and no idempotency key are stored, so the same key with
    a served executor is accepted as new."""
    for executor in ("alpha", "beta"):  # both runners have answered GetRunnerInfo
        _ran(client, executor)
    before = _every_operation(client)
    with pytest.raises(NoRunnerAvailable) as refused:
        client.submit(items=["x"], executor="gamma", idempotency_key="c6b-key")
    assert refused.value.reason == "NO_RUNNER_FOR_EXECUTOR"
    assert refused.value.metadata == {"executor": "gamma", "served": "alpha,beta,shared"}
    assert _every_operation(client) == before
    accepted = client.submit(items=["x"], executor="alpha", idempotency_key="c6b-key")
    assert accepted.replayed is False
    assert client.wait(accepted.operation.operation_id, timeout=30).runner == "r1"


@pytest.mark.rule("C6b")
def test_a_turn_for_the_default_executor_is_refused_when_no_runner_serves_it(
    client: TurnwireClient,
) -> None:
    """C6b: an empty Turn.executor names ``default``; neither runner serves one."""
    _ran(client, "alpha")
    _ran(client, "beta")
    with pytest.raises(NoRunnerAvailable) as refused:
        client.submit(items=["x"])
    assert refused.value.metadata["executor"] == "default"


@pytest.mark.rule("C6b")
def test_cli_submit_executor_routes_and_a_refused_one_exits_eight(
    stack: ExecutorStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """`turnwire submit --executor NAME`: sent to the runner serving NAME; one no
    runner serves exits 8 (NO_RUNNER) with one line naming the reason (C6b)."""
    argv = ["--address", stack.address, "--token", TOKEN]
    code = cli.main(["submit", "-i", "hi", "--executor", "beta", "--wait", "--json", *argv])
    assert code == 0
    assert '"runner": "r2"' in capsys.readouterr().out
    code = cli.main(["submit", "-i", "hi", "--executor", "nobody", *argv])
    err = capsys.readouterr().err
    assert code == 8
    assert "NO_RUNNER_FOR_EXECUTOR" in err and "'nobody'" in err, err


@pytest.mark.rule("C6b")
def test_a_turn_waits_while_its_only_runner_has_not_said_then_runs_when_it_appears(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """C6b: with its runner absent (never answered GetRunnerInfo) nothing is proven,
    so the turn is accepted; it waits, nothing sent, its waiting_for saying which
    executor it waits for and why; once a runner serving it answers, it runs there."""
    with (
        ExecutorStack(tmp_path_factory.mktemp("absent"), {"r1": None}) as stack,
        TurnwireClient(stack.address, TOKEN) as client,
    ):
        made = client.submit(items=["late"], executor="words")
        assert made.operation.state is OperationState.QUEUED
        seen = client.get(made.operation.operation_id)
        assert seen.state is OperationState.QUEUED and seen.attempt_count == 0
        assert seen.waiting_for.startswith(
            "waiting for a runner that serves executor 'words' in pool default: "
            "r1 has not said which executors it serves"
        ), seen.waiting_for
        stack.start_runner("r1", ("words=echo",))
        done = client.wait(made.operation.operation_id, timeout=60)
        assert done.state is OperationState.SUCCEEDED and done.runner == "r1"


@pytest.mark.rule("C6b", "C6a")
def test_a_turn_no_answering_runner_serves_ends_at_its_queue_timeout(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """C6b with C6a's time limit: still QUEUED at its queue timeout, it ends
    TIMED_OUT / QUEUE_TIMEOUT, NOT_STARTED (no attempt was ever made)."""
    directory = tmp_path_factory.mktemp("timeout")
    with (
        ExecutorStack(directory, {"r1": None}, queue_timeout=1.0) as stack,
        TurnwireClient(stack.address, TOKEN) as client,
    ):
        made = client.submit(items=["never"], executor="words")
        done = client.wait(made.operation.operation_id, timeout=30)
        assert done.state is OperationState.TIMED_OUT
        assert done.error is not None and done.error.reason == "QUEUE_TIMEOUT"
        assert done.execution.value == "NOT_STARTED" and done.attempt_count == 0
