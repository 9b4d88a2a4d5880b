"""The `turnwire` command against a real coordinator and runner (in-process main())."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

import turnwire.cli as cli
from tests.sdk.live_stack import TOKEN, LiveStack
from turnwire.client import OperationState, TurnwireClient

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    with LiveStack(tmp_path_factory.mktemp("live-cli")) as live:
        yield live


def run(stack: LiveStack, *argv: str, token: str = TOKEN) -> int:
    return cli.main([*argv, "--address", stack.address, "--token", token])


def test_submit_wait_json_streams_events_and_exits_zero(
    stack: LiveStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """submit --wait --json: the submission, then one JSON event per line; exit 0 on SUCCEEDED."""
    assert run(stack, "submit", "-i", "hi", "--wait", "--json", "--timeout", "30") == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["replayed"] is False
    events = lines[1:]
    assert events and events[-1]["to_state"] == "SUCCEEDED" and events[-1]["terminal"]
    assert events[-1]["operation"]["result"]["output_text"] == "hi"


def test_get_exit_status_and_result(stack: LiveStack, capsys: pytest.CaptureFixture[str]) -> None:
    """get --exit-status is 0 for SUCCEEDED; get --result prints the raw output."""
    assert run(stack, "submit", "-i", "abc", "--wait", "--json", "--timeout", "30") == 0
    operation_id = json.loads(capsys.readouterr().out.splitlines()[0])["operation_id"]
    assert run(stack, "get", operation_id, "--exit-status") == 0
    assert "SUCCEEDED" in capsys.readouterr().out
    assert run(stack, "list") == 0
    assert operation_id in capsys.readouterr().out


def test_a_failed_turn_exits_three(stack: LiveStack, capsys: pytest.CaptureFixture[str]) -> None:
    """submit --wait: a FAILED turn exits 3 and the live view shows the reason."""
    assert run(stack, "submit", "-i", "x", "--param", "fail=1", "--wait", "--timeout", "30") == 3
    out = capsys.readouterr().out
    assert "FAILED" in out and "EXECUTOR_FAILED" in out


def test_unknown_operation_exits_six_with_one_line(
    stack: LiveStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """get of an unknown id: exit 6 and one line on stderr, no traceback."""
    assert run(stack, "get", "op_" + "f" * 32) == 6
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "OPERATION_NOT_FOUND" in err and "Traceback" not in err


def test_bad_token_exits_five(stack: LiveStack, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown token: exit 5 with advice about the token."""
    assert run(stack, "list", token="wrong") == 5
    assert "check the token" in capsys.readouterr().err


def test_console_script_runs_as_a_process(stack: LiveStack) -> None:
    """`python -m turnwire.cli` (the console script's code) works end to end in a real process."""
    process = subprocess.Popen(
        [sys.executable, "-m", "turnwire.cli", "submit", "-i", "proc", "--wait", "--json",
         "--timeout", "30", "--address", stack.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"TURNWIRE_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 0, err.decode()
    assert json.loads(out.decode().splitlines()[-1])["to_state"] == "SUCCEEDED"


def test_submit_survives_a_lost_reply_and_says_it_is_the_same_turn(
    stack: LiveStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """§7 at the terminal: a dropped SubmitTurn reply is retried with the same key."""
    stack.add_fault("drop-response method=SubmitTurn count=1")
    try:
        argv = ["submit", "-i", "again", "--address", stack.proxy_address, "--token", TOKEN]
        assert cli.main(argv) == 0
    finally:
        stack.clear_faults()
    assert "already submitted with key" in capsys.readouterr().out


def test_ctrl_c_during_watch_exits_130_and_says_how_to_resume(stack: LiveStack) -> None:
    """SIGINT during `turnwire watch`: exit 130, one line naming the resume cursor."""
    with TurnwireClient(stack.address, TOKEN) as client:
        operation_id = client.submit(items=["long"], parameters={"sleep_ms": "20000"})
        operation_id_text = operation_id.operation.operation_id
    process = subprocess.Popen(
        [sys.executable, "-m", "turnwire.cli", "watch", operation_id_text,
         "--address", stack.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"TURNWIRE_TOKEN": TOKEN, "PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "utf-8"},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 30)
        assert ready, "watch printed nothing within 30 s"
        first = process.stdout.readline().decode()
        assert "QUEUED" in first
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        with TurnwireClient(stack.address, TOKEN) as client:
            client.cancel(operation_id_text)
    assert process.returncode == 130
    message = err.decode()
    assert message.count("\n") == 1 and "Traceback" not in message
    assert f"turnwire watch {operation_id_text} --after " in message


def _submit_sleeper(stack: LiveStack) -> str:
    """A turn that runs for 20 s unless cancelled (the echo executor's sleep_ms)."""
    with TurnwireClient(stack.address, TOKEN) as client:
        submitted = client.submit(items=["long"], parameters={"sleep_ms": "20000"})
    return submitted.operation.operation_id


def test_get_exit_status_of_a_turn_not_terminal_has_its_own_code(
    stack: LiveStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """get --exit-status (and --result) on a running turn exits 12, not 9 (which means
    only that --timeout passed while waiting)."""
    operation_id = _submit_sleeper(stack)
    try:
        assert run(stack, "get", operation_id, "--exit-status") == 12
        assert run(stack, "get", operation_id, "--result") == 12
        assert run(stack, "watch", operation_id, "--timeout", "0.5", "--exit-status") == 9
    finally:
        assert run(stack, "cancel", operation_id, "--wait", "--timeout", "30") == 0
    capsys.readouterr()


def test_cancel_wait_exits_zero_when_the_cancel_took_effect(
    stack: LiveStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """cancel --wait on a running turn: it ends CANCELLED and the command exits 0."""
    operation_id = _submit_sleeper(stack)
    assert run(stack, "cancel", operation_id, "--wait", "--timeout", "30") == 0
    out = capsys.readouterr().out
    assert f"cancelled: {operation_id} ended CANCELLED" in out


@pytest.mark.rule("C11")
def test_cancel_of_a_turn_that_ended_first_exits_13(
    stack: LiveStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """cancel (with or without --wait) of a turn that already SUCCEEDED: exit 13, "too
    late", and the turn stays SUCCEEDED (C11: the cancel changed nothing)."""
    assert run(stack, "submit", "-i", "done", "--wait", "--json", "--timeout", "30") == 0
    operation_id = json.loads(capsys.readouterr().out.splitlines()[0])["operation_id"]
    assert run(stack, "cancel", operation_id, "--wait", "--timeout", "30") == 13
    assert run(stack, "cancel", operation_id) == 13
    out = capsys.readouterr().out
    assert out.count(f"too late: {operation_id} had already ended SUCCEEDED") == 2
    with TurnwireClient(stack.address, TOKEN) as client:
        assert client.get(operation_id).state is OperationState.SUCCEEDED


def test_every_json_output_prints_one_flat_operation_shape(
    stack: LiveStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """submit --json, submit --wait --json (its first line and each event's snapshot),
    get --json, watch --json's snapshots and cancel --json: the same operation keys;
    a submission adds only idempotency_key and replayed."""
    assert run(stack, "submit", "-i", "shape", "--json") == 0
    submitted = json.loads(capsys.readouterr().out)
    operation_id = submitted["operation_id"]
    with TurnwireClient(stack.address, TOKEN) as client:
        client.wait(operation_id, timeout=30)
    assert run(stack, "get", operation_id, "--json") == 0
    got = json.loads(capsys.readouterr().out)
    assert run(stack, "watch", operation_id, "--json") == 0
    watched = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert run(stack, "submit", "-i", "shape", "--wait", "--json", "--timeout", "30") == 0
    first, *events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert run(stack, "cancel", operation_id, "--json") == 13
    cancelled = json.loads(capsys.readouterr().out)
    shape = set(got)
    assert "operation_id" in shape and "execution" in shape and "operation" not in shape
    assert set(submitted) == set(first) == shape | {"idempotency_key", "replayed"}
    snapshots = [event["operation"] for event in (*watched, *events) if "operation" in event]
    assert snapshots and all(set(snapshot) == shape for snapshot in snapshots)
    assert set(cancelled) == shape


@pytest.mark.rule("R15")
def test_a_failed_turn_says_how_many_executions_ran_and_why_none_was_retried(
    stack: LiveStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """R15: `--param fail=1 --wait` ends FAILED with "executions 1" and the reason no
    retry came (no policy; the built-in failure declares no effect)."""
    argv = ("submit", "-i", "x", "--param", "fail=1", "--wait", "--timeout", "30")
    assert run(stack, *argv) == 3
    out = capsys.readouterr().out
    print(out)
    assert "executions" in out and "1 (not retried: the executor declared no effect" in out
    assert run(stack, *argv, "--max-retries", "2") == 3
    assert "1 of at most 3 (not retried: the executor declared no effect" in capsys.readouterr().out


@pytest.mark.rule("R15")
def test_max_retries_retries_a_failure_declared_none_and_shows_each_execution(
    stack: LiveStack, capsys: pytest.CaptureFixture[str]
) -> None:
    """R15: --max-retries 2 --retry-backoff 0.05: the first execution fails with effect
    NONE, the second succeeds; the summary shows both executions."""
    argv = ("submit", "-i", "x", "--param", "fail_executions=1", "--max-retries", "2")
    assert run(stack, *argv, "--retry-backoff", "0.05", "--wait", "--timeout", "30") == 0
    out = capsys.readouterr().out
    print(out)
    assert "2 of at most 3" in out
    assert "FAILED EXECUTOR_FAILED, effect NONE" in out and "SUCCEEDED" in out
