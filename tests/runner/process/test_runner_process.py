"""The runner as a real process: serve, SIGTERM, second-process refusal, crash points."""

from __future__ import annotations

import contextlib
import re
import socket
from pathlib import Path

import grpc
import pytest

from tests.runner.live import dispatch_request, envelope
from tests.support import runner_access
from tests.support.runner_process import run_cli, runner_process
from turnwire.common.v1 import turn_pb2
from turnwire.ledger import count_starts
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.testing.processes import LaunchError

R = runner_pb2


def stub_for(address: str) -> tuple[grpc.Channel, runner_pb2_grpc.RunnerServiceStub]:
    channel = runner_access.sync_channel(address)
    return channel, runner_pb2_grpc.RunnerServiceStub(channel)


@pytest.mark.rule("R1", "R8")
def test_serve_answers_status_and_sigterm_drains_to_exit_zero(tmp_path: Path) -> None:
    """R1/R8: a served runner names a 32-hex incarnation; SIGTERM drains and exits 0."""
    with runner_process(tmp_path / "r.db", tmp_path, executor="sleep") as runner:
        channel, stub = stub_for(runner.address)
        try:
            reply = stub.GetOperationStatus(
                R.GetOperationStatusRequest(operation_id="op_none"), timeout=5
            )
            assert re.fullmatch(r"[0-9a-f]{32}", reply.incarnation_id)
            assert not reply.present and reply.durable and reply.store_id
            body = envelope("op_run", sleep_ms=300)
            stub.Dispatch(dispatch_request("op_run", body, reply.incarnation_id), timeout=5)
        finally:
            channel.close()
        runner.terminate()
        assert runner.wait(20) == 0, runner.output()
        assert f"listening on {runner.address}" in runner.output()
    again = runner_process(tmp_path / "r.db", tmp_path, executor="sleep")
    with again:
        channel, stub = stub_for(again.address)
        try:
            done = stub.GetOperationStatus(R.GetOperationStatusRequest(operation_id="op_run"))
            assert done.operation.state == R.RUNNER_OPERATION_STATE_SUCCEEDED  # drained, not cut
            assert done.incarnation_id != reply.incarnation_id
            assert done.store_id == reply.store_id
        finally:
            channel.close()
        again.terminate()
        assert again.wait(20) == 0


def test_second_serve_on_the_same_store_refuses_to_start(tmp_path: Path) -> None:
    """§6: one live process per store: a second serve exits non-zero with a clear message."""
    with runner_process(tmp_path / "r.db", tmp_path) as first:
        with pytest.raises(LaunchError, match="in use by another runner process"):
            runner_process(tmp_path / "r.db", tmp_path, name="second")
        first.terminate()
        assert first.wait(20) == 0


def test_serve_refuses_a_port_in_use(tmp_path: Path) -> None:
    """A runner never shares a port: a used listen address is refused at start."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli(
            [
                "serve",
                "--store",
                str(tmp_path / "r.db"),
                "--listen",
                f"127.0.0.1:{port}",
                *runner_access.runner_flags(),
            ]
        )
    assert done.returncode != 0
    assert "cannot listen" in done.stderr


def test_help_answers() -> None:
    """`python -m runner_svc serve --help` lists the flags an operator needs."""
    done = run_cli(["serve", "--help"])
    assert done.returncode == 0
    for flag in (
        "--listen",
        "--store",
        "--writable-slots",
        "--read-only-slots",
        "--executor",
        "--ledger",
        "--drain-seconds",
        "--address-file",
        "--log-level",
    ):
        assert flag in done.stdout


def test_flags_fall_back_to_environment_variables() -> None:
    """Operators may configure serve by TURNWIRE_RUNNER_* variables instead of flags."""
    env = {
        "TURNWIRE_RUNNER_WRITABLE_SLOTS": "7",
        "TURNWIRE_RUNNER_STORE": "/tmp/x.db",
        "TURNWIRE_RUNNER_DRAIN_SECONDS": "2.5",
    }
    done = run_cli(["serve", "--help"], env=env)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "WRITABLE_SLOTS; default 7)" in text and "DRAIN_SECONDS; default 2.5)" in text
    assert "RUNNER_STORE; default /tmp/x.db)" in text


def test_bad_executor_spec_is_refused_clearly(tmp_path: Path) -> None:
    """A bad --executor exits non-zero naming the valid specs, before touching the store."""
    done = run_cli(
        [
            "serve",
            "--store",
            str(tmp_path / "r.db"),
            "--executor",
            "nonsense",
            *runner_access.runner_flags(),
        ]
    )
    assert done.returncode == 2
    assert "invalid executor spec" in done.stderr
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("by_env", [False, True], ids=["flag", "env"])
def test_metered_without_a_ledger_is_refused_naming_the_flag(tmp_path: Path, by_env: bool) -> None:
    """--executor metered (or TURNWIRE_RUNNER_EXECUTOR=metered) without --ledger: exit 2
    naming --ledger and TURNWIRE_RUNNER_LEDGER, before the store (or anything) is opened."""
    store = tmp_path / "r.db"
    executor = [] if by_env else ["--executor", "metered"]
    done = run_cli(
        ["serve", "--store", str(store), *executor, *runner_access.runner_flags(),
         "--metrics-listen", "127.0.0.1:0", "--metrics-address-file", str(tmp_path / "m")],
        env={"TURNWIRE_RUNNER_EXECUTOR": "metered"} if by_env else None,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--ledger" in done.stderr and "TURNWIRE_RUNNER_LEDGER" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert not store.exists() and not (tmp_path / "m").exists()


@pytest.mark.rule("R3")
@pytest.mark.parametrize(
    ("crash_at", "sleep_ms", "state", "execution", "starts"),
    [
        pytest.param(
            "runner.after_launch_intent",
            None,
            R.RUNNER_OPERATION_STATE_INTERRUPTED,
            turn_pb2.EXECUTION_UNKNOWN,
            0,
            id="intent-only",
        ),
        pytest.param(
            # A turn still running when its start confirmation is written.
            "runner.after_executor_finished",
            500,
            R.RUNNER_OPERATION_STATE_INTERRUPTED,
            turn_pb2.EXECUTION_STARTED,
            1,
            id="confirmed",
        ),
        pytest.param(
            # A turn that finished as it started: no confirmation of its own,
            # and the crash came before the settlement that records the start.
            "runner.after_executor_finished",
            None,
            R.RUNNER_OPERATION_STATE_INTERRUPTED,
            turn_pb2.EXECUTION_UNKNOWN,
            1,
            id="finished-before-confirmation",
        ),
    ],
)
def test_crash_between_durable_steps_is_reported_truthfully(
    tmp_path: Path, crash_at: str, sleep_ms: int | None, state: int, execution: int, starts: int
) -> None:
    """R3/§6: after SIGKILL, intent-only reads UNKNOWN, confirmed reads STARTED, and a
    turn that ran but whose start only its settlement would have recorded reads
    UNKNOWN (never NOT_STARTED); never re-run. (The intent is the admission's own
    write, issue 27, and the start follows it at once: the process may die before
    its Dispatch reply is out.)"""
    store, ledger = tmp_path / "r.db", tmp_path / "ledger.jsonl"
    body = envelope("op_crash", sleep_ms=sleep_ms)
    crashing = runner_process(
        store,
        tmp_path,
        executor="metered",
        ledger_path=ledger,
        env={"TURNWIRE_CRASH_AT": crash_at},
    )
    with crashing:
        channel, stub = stub_for(crashing.address)
        try:
            first = stub.GetOperationStatus(R.GetOperationStatusRequest(operation_id="op_crash"))
            with contextlib.suppress(grpc.RpcError):
                stub.Dispatch(dispatch_request("op_crash", body, first.incarnation_id), timeout=5)
        finally:
            channel.close()
        assert crashing.wait(20) != 0  # killed by its crash point
    with runner_process(store, tmp_path, executor="metered", ledger_path=ledger) as restarted:
        channel, stub = stub_for(restarted.address)
        try:
            seen = stub.GetOperationStatus(R.GetOperationStatusRequest(operation_id="op_crash"))
            assert (seen.operation.state, seen.operation.execution) == (state, execution)
            assert seen.operation.incarnation_id == first.incarnation_id
            again = stub.Dispatch(dispatch_request("op_crash", body, seen.incarnation_id))
            assert again.duplicate
        finally:
            channel.close()
        restarted.terminate()
        assert restarted.wait(20) == 0
    assert count_starts(ledger)["op_crash"] == starts


@pytest.mark.rule("R3")
def test_crash_after_dedupe_commit_leaves_a_row_no_later_incarnation_launches(
    tmp_path: Path,
) -> None:
    """R3/§6: an accepted row never replied to survives. The turn launches at once, so
    its admission's write carried its launch intent (R4, issue 27): the next
    incarnation reports it INTERRUPTED, execution UNKNOWN (the executor may or may
    not have started, as far as any store can tell), never re-admits it (§6
    re-admits only a row accepted and never launched), answers it as a duplicate
    of the dead incarnation's row, and the turn never starts."""
    store, ledger = tmp_path / "r.db", tmp_path / "ledger.jsonl"
    body = envelope("op_acc")
    crashing = runner_process(
        store,
        tmp_path,
        executor="metered",
        ledger_path=ledger,
        env={"TURNWIRE_CRASH_AT": "runner.after_dedupe_commit"},
    )
    with crashing:
        channel, stub = stub_for(crashing.address)
        try:
            first = stub.GetOperationStatus(R.GetOperationStatusRequest(operation_id="op_acc"))
            with pytest.raises(grpc.RpcError):
                stub.Dispatch(dispatch_request("op_acc", body, first.incarnation_id), timeout=5)
        finally:
            channel.close()
        crashing.wait(20)
    with runner_process(store, tmp_path, executor="metered", ledger_path=ledger) as restarted:
        channel, stub = stub_for(restarted.address)
        try:
            seen = stub.GetOperationStatus(R.GetOperationStatusRequest(operation_id="op_acc"))
            assert (seen.operation.state, seen.operation.execution) == (
                R.RUNNER_OPERATION_STATE_INTERRUPTED,
                turn_pb2.EXECUTION_UNKNOWN,
            )
            assert seen.operation.incarnation_id == first.incarnation_id
            reply = stub.Dispatch(dispatch_request("op_acc", body, seen.incarnation_id, attempt=2))
            assert reply.duplicate
            assert reply.operation.state == R.RUNNER_OPERATION_STATE_INTERRUPTED
            assert reply.operation.incarnation_id == first.incarnation_id
        finally:
            channel.close()
        restarted.terminate()
        assert restarted.wait(20) == 0
    assert count_starts(ledger).get("op_acc", 0) == 0
