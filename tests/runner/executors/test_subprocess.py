"""The subprocess executor: envelope on stdin, result on stdout, group kill (R10, R6)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path

import pytest
from google.protobuf import json_format

from runner_svc.executors import load_executor
from runner_svc.executors.process import ProcessExecution
from tests.runner.executors.turns import (
    INCARNATION,
    gone_within,
    make_request,
    read_pid_file,
    settle,
)
from turnwire.runner.v1 import runner_pb2


def end_processes(*pids: int) -> None:
    """Test cleanup: SIGKILL whatever a failed test left behind, by pid."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


async def start(command: str, **kwargs: object) -> ProcessExecution:
    handle = await load_executor(f"subprocess:{command}").start(make_request(**kwargs))
    assert isinstance(handle, ProcessExecution)
    return handle


@pytest.mark.rule("R10")
def test_stdin_carries_the_envelope_json_with_the_attempt_identity() -> None:
    """R10: stdin holds {operation_id, incarnation_id, attempt, envelope} as documented."""
    request = make_request("op-json", attempt=3, parameters={"temperature": "0.2"})

    async def scenario():
        handle = await load_executor("subprocess:cat").start(request)
        return await settle(handle)

    outcome = asyncio.run(scenario())
    assert outcome.succeeded
    document = json.loads(outcome.output)
    assert set(document) == {"operation_id", "incarnation_id", "attempt", "envelope"}
    assert document["operation_id"] == "op-json"
    assert document["incarnation_id"] == INCARNATION
    assert document["attempt"] == 3
    assert document["envelope"]["model"]["parameters"] == {"temperature": "0.2"}
    parsed = json_format.ParseDict(document["envelope"], runner_pb2.TurnEnvelope())
    assert parsed == request.envelope


@pytest.mark.rule("R10")
def test_exit_zero_succeeds_with_stdout_as_the_output() -> None:
    """R10: exit status 0 is success and stdout is the result."""

    async def scenario():
        return await settle(await start("printf 'the answer'; echo noise >&2"))

    outcome = asyncio.run(scenario())
    assert outcome.succeeded
    assert outcome.output == b"the answer"
    assert outcome.content_type == "application/octet-stream"
    assert outcome.metadata["exit_code"] == "0"


@pytest.mark.rule("R10")
def test_non_zero_exit_fails_with_the_stderr_tail() -> None:
    """R10: a non-zero exit is EXECUTOR_FAILED with the status and stderr in the message."""

    async def scenario():
        return await settle(await start("echo partial; echo 'model quota gone' >&2; exit 3"))

    outcome = asyncio.run(scenario())
    assert not outcome.succeeded
    assert outcome.error_reason == "EXECUTOR_FAILED"
    assert "exit status 3" in outcome.error_message
    assert "model quota gone" in outcome.error_message
    assert outcome.output == b""


@pytest.mark.rule("R10")
def test_stdout_over_the_limit_is_result_invalid() -> None:
    """R10: more than 1 MiB on stdout fails the turn with RESULT_INVALID."""

    async def scenario():
        return await settle(await start("head -c 3000000 /dev/zero"))

    outcome = asyncio.run(scenario())
    assert not outcome.succeeded
    assert outcome.error_reason == "RESULT_INVALID"


@pytest.mark.rule("R10")
def test_a_command_that_ignores_a_large_stdin_still_settles() -> None:
    """R10: an envelope bigger than a pipe buffer never blocks a command that does not read it."""
    big = (b"z" * 1024 * 1024,)

    async def scenario():
        return await settle(await start("printf done", contents=big))

    outcome = asyncio.run(scenario())
    assert outcome.succeeded
    assert outcome.output == b"done"


@pytest.mark.rule("R10", "R6")
def test_cancel_kills_the_whole_process_group(tmp_path: Path) -> None:
    """R10/R6: cancel ends the shell AND its grandchild; wait() settles CANCELLED."""
    grandchild_file = tmp_path / "grandchild.pid"
    pids: list[int] = []

    async def scenario():
        handle = await start(f"sleep 600 & echo $! > {grandchild_file}; wait")
        pids.append(handle.pid)
        pids.append(await read_pid_file(grandchild_file))
        await handle.cancel(grace_seconds=10.0)
        return await settle(handle)

    try:
        outcome = asyncio.run(scenario())
        assert outcome.error_reason == "CANCELLED"
        assert "SIGTERM" in outcome.error_message
        assert all(gone_within(pid) for pid in pids)
    finally:
        end_processes(*pids)


@pytest.mark.rule("R10", "R6")
def test_a_process_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    """R10/R6: cancel sends SIGTERM first, then SIGKILL to the group after the grace."""
    term_seen = tmp_path / "term-seen"
    grandchild_file = tmp_path / "grandchild.pid"
    command = (
        f"trap 'echo yes > {term_seen}' TERM; "
        f"sh -c 'trap \"\" TERM; echo $$ > {grandchild_file}; exec sleep 600' & "
        "while :; do sleep 0.05; done"
    )
    pids: list[int] = []

    async def scenario():
        handle = await start(command)
        pids.append(handle.pid)
        pids.append(await read_pid_file(grandchild_file))
        await handle.cancel(grace_seconds=1.0)
        return await settle(handle)

    try:
        outcome = asyncio.run(scenario())
        assert outcome.error_reason == "CANCELLED"
        assert "SIGKILL" in outcome.error_message
        assert term_seen.read_text() == "yes\n"  # SIGTERM came first and was survived
        assert all(gone_within(pid) for pid in pids)
    finally:
        end_processes(*pids)


@pytest.mark.rule("R6")
def test_processes_left_behind_are_killed_when_the_command_exits(tmp_path: Path) -> None:
    """R6: when the shell exits, a background process it left in its group is ended."""
    grandchild_file = tmp_path / "grandchild.pid"
    pids: list[int] = []

    async def scenario():
        handle = await start(f"sleep 600 > /dev/null 2>&1 & echo $! > {grandchild_file}; printf ok")
        pids.append(handle.pid)
        outcome = await settle(handle)
        pids.append(int(grandchild_file.read_text()))
        return outcome

    try:
        outcome = asyncio.run(scenario())
        assert outcome.succeeded
        assert outcome.output == b"ok"
        assert all(gone_within(pid) for pid in pids)
    finally:
        end_processes(*pids)


@pytest.mark.rule("R6")
def test_cancel_after_settlement_is_a_no_op() -> None:
    """R6: cancelling a settled execution changes nothing and signals nobody."""

    async def scenario():
        handle = await start("printf fine")
        first = await settle(handle)
        await handle.cancel(grace_seconds=0.1)
        return first, await settle(handle)

    first, second = asyncio.run(scenario())
    assert first.succeeded
    assert first == second


@pytest.mark.rule("R10")
def test_a_missing_command_fails_with_the_shell_status() -> None:
    """R10: a command the shell cannot find is EXECUTOR_FAILED with status 127."""

    async def scenario():
        return await settle(await start("no_such_command_for_turnwire_tests"))

    outcome = asyncio.run(scenario())
    assert outcome.error_reason == "EXECUTOR_FAILED"
    assert "exit status 127" in outcome.error_message


@pytest.mark.rule("R6")
def test_stopping_the_event_loop_kills_an_unsettled_process_group(tmp_path: Path) -> None:
    """R6: a loop that ends with a turn still running leaves no process of it behind."""
    grandchild_file = tmp_path / "grandchild.pid"
    pids: list[int] = []

    async def scenario() -> None:
        handle = await start(f"sleep 600 & echo $! > {grandchild_file}; wait")
        pids.append(handle.pid)
        pids.append(await read_pid_file(grandchild_file))
        # Return without wait(): asyncio.run cancels the execution's task.

    try:
        asyncio.run(scenario())
        assert all(gone_within(pid) for pid in pids)
    finally:
        end_processes(*pids)
