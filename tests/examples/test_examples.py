"""The executors under examples/ work as docs/EXECUTORS.md says: their own tests pass
as a user runs them, and a real runner process serves them and streams their output."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.contract.repo_copy import in_ci
from tests.runner.live import dispatch_request, envelope
from tests.runner.process.test_runner_process import stub_for
from tests.support.runner_process import REPO_ROOT, runner_process
from turnwire.common.v1 import turn_pb2
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc

R = runner_pb2
EXAMPLES = REPO_ROOT / "examples"


def test_the_python_examples_own_tests_pass() -> None:
    """examples/python/test_word_streamer.py: turnwire.executor.testing, as a user runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_word_streamer.py"],
        cwd=EXAMPLES / "python",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO_ROOT}:{EXAMPLES / 'python'}"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[runner_pb2_grpc.RunnerServiceStub]:
    if shutil.which("node") is None:
        (pytest.fail if in_ci() else pytest.skip)("the JavaScript example needs node on PATH")
    work = tmp_path_factory.mktemp("examples")
    flags = [
        "--executor", "words=python:word_streamer:stream_reply",
        "--executor", "words-js=subprocess+framed:node examples/framed/word_streamer.mjs",
        "--executor", "hello=subprocess+framed:sh examples/framed/hello.sh",
    ]  # fmt: skip
    path = {"PYTHONPATH": f"{REPO_ROOT}:{EXAMPLES / 'python'}"}
    with runner_process(work / "r.db", work, extra_args=flags, env=path) as process:
        channel, stub = stub_for(process.address)
        try:
            yield stub
        finally:
            channel.close()
            process.terminate()
            assert process.wait(20) == 0, process.output()


def _run(
    stub: runner_pb2_grpc.RunnerServiceStub, op: str, executor: str, **knobs: object
) -> list[runner_pb2.StreamOutputResponse]:
    incarnation = stub.GetRunnerInfo(R.GetRunnerInfoRequest(), timeout=5).incarnation_id
    body = envelope(op, executor=executor, **knobs)  # type: ignore[arg-type]
    stub.Dispatch(dispatch_request(op, body, incarnation), timeout=5)
    request = R.StreamOutputRequest(operation_id=op)
    return list(stub.StreamOutput(request, timeout=30))


def _chunks(messages: list[runner_pb2.StreamOutputResponse]) -> list[bytes]:
    return [m.chunk.data for m in messages if m.WhichOneof("item") == "chunk"]


@pytest.mark.parametrize("executor", ["words", "words-js"])
def test_the_word_streamers_stream_each_word_then_settle(
    runner: runner_pb2_grpc.RunnerServiceStub, executor: str
) -> None:
    """Python (turnwire.executor) and JavaScript (framed) alike: one chunk per word,
    in order, then the end with the result."""
    messages = _run(
        runner,
        f"op_{executor}",
        executor,
        items=("tokens as they come",),
        parameters={"pause_ms": "20"},
        heartbeat_ms=2000,
    )
    assert _chunks(messages) == [b"TOKENS ", b"AS ", b"THEY ", b"COME "]
    end = messages[-1].end
    assert end.operation.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
    assert end.operation.result.output == b"TOKENS AS THEY COME"
    assert end.operation.result.metadata["words"] == "4"


def test_the_shell_example_streams_hello_world(runner: runner_pb2_grpc.RunnerServiceStub) -> None:
    messages = _run(runner, "op_hello", "hello")
    assert _chunks(messages) == [b"Hello, ", b"world"]
    assert messages[-1].end.operation.result.output == b"Hello, world"


def test_the_javascript_example_says_no_effect_when_stopped(
    runner: runner_pb2_grpc.RunnerServiceStub,
) -> None:
    """Its SIGTERM handler sends an error frame with effect none and exits 75: the
    turn ends CANCELLED with the declared effect NONE on its row."""
    incarnation = runner.GetRunnerInfo(R.GetRunnerInfoRequest(), timeout=5).incarnation_id
    body = envelope(
        "op_stop", executor="words-js", items=("a b c d e f g h",), parameters={"pause_ms": "500"}
    )
    runner.Dispatch(dispatch_request("op_stop", body, incarnation), timeout=5)
    stream = runner.StreamOutput(R.StreamOutputRequest(operation_id="op_stop"), timeout=30)
    first = next(stream)
    assert first.chunk.data == b"A "  # it runs, its SIGTERM handler is in place
    runner.Cancel(
        R.CancelRequest(
            operation_id="op_stop", expected_incarnation_id=incarnation, fencing_token=1
        ),
        timeout=5,
    )
    end = next(m for m in stream if m.WhichOneof("item") == "end").end.operation
    assert end.state == R.RUNNER_OPERATION_STATE_CANCELLED
    assert end.error.effect == turn_pb2.DECLARED_EFFECT_NONE
