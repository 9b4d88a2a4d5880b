"""Several ``--executor NAME=SPEC`` per runner process (R14), a framed subprocess
streaming through StreamOutput with frames as heartbeats (R12, R13), and bad
executor flags refused before anything opens."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.runner.live import dispatch_request, envelope
from tests.runner.process.test_runner_process import stub_for
from tests.support import runner_access
from tests.support.runner_process import run_cli, runner_process
from turnwire.runner.v1 import runner_pb2

R = runner_pb2
# A framed executor in plain shell: one chunk every 0.1 s, then the result.
FRAMED = (
    "read -r request; for i in 1 2 3 4 5 6; do "
    'printf \'{"type":"chunk","text":"t%s "}\\n\' "$i"; sleep 0.1; done; '
    'printf \'{"type":"result","text":"done"}\\n\''
)


@pytest.mark.rule("R14", "R12", "R13")
def test_named_executors_are_served_reported_and_stream(tmp_path: Path) -> None:
    """R14: every --executor is served under its name and GetRunnerInfo lists them;
    R12/R13: a framed command whose frames come well within its heartbeat timeout
    runs past it, and its chunks reach StreamOutput before the end."""
    flags = [
        "--executor",
        f"framed=subprocess+framed:sh -c {shlex.quote(FRAMED)}",
        "--executor",
        "words=python:tests.executor.functions:stream_words",
    ]
    with runner_process(tmp_path / "r.db", tmp_path, extra_args=flags) as runner:
        channel, stub = stub_for(runner.address)
        try:
            info = stub.GetRunnerInfo(R.GetRunnerInfoRequest(), timeout=5)
            assert [(e.name, e.kind) for e in info.executors] == [
                ("default", "echo"),
                ("framed", "subprocess+framed"),
                ("words", "python"),
            ]
            body = envelope("op_f", executor="framed", heartbeat_ms=400)
            stub.Dispatch(dispatch_request("op_f", body, info.incarnation_id), timeout=5)
            streamed = list(
                stub.StreamOutput(R.StreamOutputRequest(operation_id="op_f"), timeout=20)
            )
            data = [m.chunk.data for m in streamed if m.WhichOneof("item") == "chunk"]
            assert b"".join(data) == b"t1 t2 t3 t4 t5 t6 "
            end = streamed[-1].end
            assert end.final_offset == 6
            assert end.operation.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            assert end.operation.result.output == b"done"
        finally:
            channel.close()
        runner.terminate()
        assert runner.wait(20) == 0, runner.output()
        assert "executors default=echo, framed=subprocess+framed, words=python" in runner.output()


def test_bad_executor_flags_exit_2_before_anything_opens(tmp_path: Path) -> None:
    """A name given twice, a name with no spec, a python target that does not import:
    exit 2 with one line saying which, and no store is created."""
    store = tmp_path / "r.db"
    cases = {
        ("a=echo", "a=sleep"): "--executor 'a' is given twice",
        ("a=",): "names no spec",
        ("a=python:tests.no_such_module:f",): "cannot import module 'tests.no_such_module'",
        ("a=python:tests.executor.functions:Nope",): "has no attribute 'Nope'",
    }
    for values, expected in cases.items():
        flags = [arg for value in values for arg in ("--executor", value)]
        done = run_cli(["serve", "--store", str(store), *flags, *runner_access.runner_flags()])
        assert done.returncode == 2, (values, done.stderr)
        assert expected in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not store.exists()
