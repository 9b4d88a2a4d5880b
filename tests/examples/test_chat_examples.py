"""The chat examples (examples/http/openai_chat.py, examples/framed/chat_stream.mjs)
end to end: a real coordinator and a real runner process, against the stub server
(real HTTP and server-sent events on 127.0.0.1). docs/EXECUTORS.md, "An HTTP
executor"; issue 25 item 5."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.examples.chat_stack import API_KEY, EXAMPLES, ChatRun, ChatStack, need_node
from tests.support.runner_process import REPO_ROOT
from turnwire.client import Execution, OperationState
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.runner.v1 import runner_pb2

pytestmark = pytest.mark.timeout(120)
EXECUTORS = ["chat", "chat-js"]  # Python (turnwire.executor) and JavaScript (framed)
SILENCE_SECONDS = 1.5


def test_the_http_examples_own_tests_pass() -> None:
    """examples/http/test_openai_chat.py, as a user runs it (turnwire.executor.testing
    against the stub server): every mapping of a failure to its declared effect."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_openai_chat.py"],
        cwd=EXAMPLES / "http",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO_ROOT}:{EXAMPLES / 'http'}"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "14 passed" in done.stdout


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChatStack]:
    # A short read timeout for stub-hang; stub-slow200's 200 ms between tokens is well in it.
    env = {"OPENAI_TIMEOUT": str(SILENCE_SECONDS)}
    with ChatStack.start(tmp_path_factory.mktemp("chat-examples"), env=env) as chat:
        yield chat


def _runner_view(stack: ChatStack, run: ChatRun) -> tuple[list[bytes], runner_pb2.RunnerOperation]:
    """What the runner streamed for the turn (its chunks, R13) and its settled row."""
    chunks, row = stack.runner_output(run.operation_id)
    assert row is not None, "the runner's stream ended without its end"
    return chunks, row


def _requests_for(stack: ChatStack, run: ChatRun) -> list[object]:
    return [r for r in stack.stub.requests if r.idempotency_key == run.operation_id]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_chat_turn_streams_its_tokens_and_succeeds_with_the_whole_text(
    stack: ChatStack, executor: str
) -> None:
    run = stack.submit_and_wait(
        executor, model="stub-echo", text="tokens as they come", parameters={"temperature": "0"}
    )
    assert (run.operation.state, run.operation.execution) == (
        OperationState.SUCCEEDED,
        Execution.STARTED,
    ), run.operation
    assert run.text == "tokens as they come"
    assert run.operation.result is not None
    assert run.operation.result.metadata["finish_reason"] == "stop"
    assert run.operation.result.metadata["tokens"] == "4"
    chunks, _ = _runner_view(stack, run)
    assert chunks == [b"tokens", b" as", b" they", b" come"]
    # The stub saw one request for the turn, keyed by its operation id, with the key
    # from the runner's environment and the parameter typed for the API.
    (request,) = _requests_for(stack, run)
    assert request.idempotency_key == run.operation_id  # type: ignore[attr-defined]
    assert request.authorization == f"Bearer {API_KEY}"  # type: ignore[attr-defined]
    assert request.body["temperature"] == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_stream_broken_after_tokens_ends_failed_with_effect_applied(
    stack: ChatStack, executor: str
) -> None:
    run = stack.submit_and_wait(executor, model="stub-break2", text="one two three four")
    assert (run.operation.state, run.operation.execution) == (
        OperationState.FAILED,
        Execution.STARTED,
    ), run.operation
    assert run.operation.error is not None
    assert run.operation.error.reason == "EXECUTOR_FAILED"
    assert "broke after 2 tokens" in run.operation.error.message
    chunks, row = _runner_view(stack, run)
    assert chunks == [b"one", b" two"]
    assert row.error.effect == turn_pb2.DECLARED_EFFECT_APPLIED
    assert len(_requests_for(stack, run)) == 1


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_429_without_a_retry_policy_ends_failed_with_effect_none(
    stack: ChatStack, executor: str
) -> None:
    """stub-429x1 refuses a key's first request only: without a retry policy the turn
    ends at that refusal, having sent exactly one request, nothing streamed."""
    run = stack.submit_and_wait(executor, model="stub-429x1", text="hello")
    assert (run.operation.state, run.operation.execution) == (
        OperationState.FAILED,
        Execution.STARTED,
    ), run.operation
    assert run.operation.error is not None and "429" in run.operation.error.message
    chunks, row = _runner_view(stack, run)
    assert chunks == []
    assert row.error.effect == turn_pb2.DECLARED_EFFECT_NONE
    assert row.error.retry_after.seconds == 1
    assert len(_requests_for(stack, run)) == 1


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_server_gone_silent_after_the_request_ends_failed_with_the_effect_unknown(
    stack: ChatStack, executor: str
) -> None:
    """stub-hang reads the request and never answers: after OPENAI_TIMEOUT the call is
    abandoned. The provider had the request, so nothing is declared (UNSPECIFIED)."""
    run = stack.submit_and_wait(executor, model="stub-hang", text="hello")
    assert (run.operation.state, run.operation.execution) == (
        OperationState.FAILED,
        Execution.STARTED,
    ), run.operation
    assert run.operation.error is not None and "outcome unknown" in run.operation.error.message
    _, row = _runner_view(stack, run)
    assert row.error.effect == turn_pb2.DECLARED_EFFECT_UNSPECIFIED
    assert len(_requests_for(stack, run)) == 1


def test_the_javascript_executor_says_no_effect_when_it_cannot_connect() -> None:
    """Nothing listens on the port: the request never left, so effect none, exit 75."""
    need_node()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    request = {"operation_id": "op_x", "items": [{"role": "user", "text": "hi"}],
               "envelope": {"model": {"name": "stub-echo"}}}  # fmt: skip
    done = subprocess.run(
        [str(shutil.which("node")), str(EXAMPLES / "framed" / "chat_stream.mjs")],
        input=json.dumps(request) + "\n",
        env={"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    final = json.loads(done.stdout.splitlines()[-1])
    assert final["type"] == "error" and final["effect"] == "none", done.stdout + done.stderr
    assert "ECONNREFUSED" in final["message"]
    assert done.returncode == 75


@pytest.mark.rule("R6", "R7")
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_cancel_mid_stream_ends_cancelled_with_the_tokens_declared(
    stack: ChatStack, executor: str
) -> None:
    """A cancel once tokens flow: the async task is cancelled (Python) or the process
    gets SIGTERM (JavaScript); either closes the stream and declares APPLIED, and the
    turn ends CANCELLED (R6, R7)."""
    words = " ".join(f"w{n}" for n in range(50))
    operation_id = stack.submit(executor, model="stub-slow200", text=words)
    first, _ = stack.runner_output(operation_id, first_only=True)
    assert first == [b"w0"]
    stack.client.cancel(operation_id)
    run = stack.wait(operation_id)
    assert (run.operation.state, run.operation.execution) == (
        OperationState.CANCELLED,
        Execution.STARTED,
    ), run.operation
    chunks, row = _runner_view(stack, run)
    assert 0 < len(chunks) < 50
    assert row.error.effect == turn_pb2.DECLARED_EFFECT_APPLIED


def test_the_coordinators_operation_carries_the_declared_effect(stack: ChatStack) -> None:
    """The public Operation says NONE for a 429, as the runner's row does (R7)."""
    run = stack.submit_and_wait("chat", model="stub-429", text="hello")
    assert run.proto.error.effect == turn_pb2.DECLARED_EFFECT_NONE
    assert run.proto.execution_count == 1


def _retry_twice(turn: coordinator_pb2.Turn) -> None:
    turn.retry_policy.max_retries = 2
    turn.retry_policy.initial_backoff.FromMilliseconds(100)


@pytest.mark.rule("R15")
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_429_then_success_with_a_retry_policy_succeeds_after_two_executions(
    stack: ChatStack, executor: str
) -> None:
    """stub-429x1 refuses a key's first request with 429 (Retry-After: 1) and serves
    the next: with a retry policy the runner runs the executor again, with the same
    operation id as the Idempotency-Key, and the operation says so: 2 executions,
    the first FAILED declaring no effect, the second the one that produced the result."""
    run = stack.submit_and_wait(
        executor, model="stub-429x1", text="tokens as they come", configure=_retry_twice
    )
    assert (run.operation.state, run.operation.execution) == (
        OperationState.SUCCEEDED,
        Execution.STARTED,
    ), run.operation
    assert run.text == "tokens as they come"
    op = run.proto
    assert (op.execution_count, op.result_execution) == (2, 2)
    first, second = op.executions
    assert (first.number, first.outcome, first.effect) == (
        1,
        turn_pb2.EXECUTION_OUTCOME_FAILED,
        turn_pb2.DECLARED_EFFECT_NONE,
    )
    assert "429" in first.message
    assert (second.number, second.outcome) == (2, turn_pb2.EXECUTION_OUTCOME_SUCCEEDED)
    # The provider saw the same key twice: the one request it refused, the one it served.
    assert stack.stub.keys().count(run.operation_id) == 2
    # The retry waited for the provider's Retry-After (1 s), not the 100 ms backoff
    # (less a little: the wait starts from a clock read just before the end is stamped).
    waited = second.launched_at.ToDatetime() - first.ended_at.ToDatetime()
    assert waited >= timedelta(seconds=0.9), waited


@pytest.mark.rule("R15")
def test_a_failure_after_tokens_is_not_retried_even_with_a_retry_policy(stack: ChatStack) -> None:
    """A stream broken after tokens declares APPLIED: the policy allows 2 retries,
    and none runs; one execution, one request."""
    run = stack.submit_and_wait(
        "chat", model="stub-break2", text="one two three four", configure=_retry_twice
    )
    assert run.operation.state == OperationState.FAILED, run.operation
    assert run.proto.execution_count == 1
    assert run.proto.executions[0].effect == turn_pb2.DECLARED_EFFECT_APPLIED
    assert len(_requests_for(stack, run)) == 1
