"""The framed subprocess protocol, ``subprocess+framed:`` (runner_svc/executors/frames.py).

Real /bin/sh commands, real pipes and process groups, real signals; the
runner side is a recording channel with the runner's limit checks.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from runner_svc.executors import ExecutionOutcome, load_executor
from runner_svc.executors.process import ProcessExecution
from tests.runner.executors.test_subprocess import end_processes
from tests.runner.executors.turns import gone_within, make_request, read_pid_file, settle
from turnwire.executor.outcomes import OutputRefused
from turnwire.output_stream import Chunk, OutputStream, Refusal, StreamLimits

LIMITS = StreamLimits(max_chunk_bytes=16, turn_budget_bytes=64)


class Recording:
    """A channel as the runner's: the stream's limits, every chunk and heartbeat kept."""

    def __init__(self) -> None:
        self.stream = OutputStream()
        self.chunks: list[Chunk] = []
        self.heartbeats = 0
        self.lock = threading.Lock()

    def emit(self, data: bytes, content_type: str) -> int:
        with self.lock:
            added = self.stream.append(data, content_type, 0.0, LIMITS)
            if isinstance(added, Refusal):
                raise OutputRefused(added.reason, added.message)
            self.chunks.append(added)
            return added.offset

    def heartbeat(self) -> None:
        with self.lock:
            self.heartbeats += 1


async def start(command: str, channel: Recording, **kwargs: object) -> ProcessExecution:
    request = replace(make_request(**kwargs), channel=channel, stream_limits=LIMITS)
    handle = await load_executor(f"subprocess+framed:{command}").start(request)
    assert isinstance(handle, ProcessExecution)
    return handle


async def until_framed(channel: Recording) -> None:
    """Until the command's first frame came (bounded: 10 s)."""
    for _ in range(500):
        if channel.heartbeats:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the command sent no frame")


def run(command: str, **kwargs: object) -> tuple[ExecutionOutcome, Recording]:
    channel = Recording()

    async def scenario() -> ExecutionOutcome:
        return await settle(await start(command, channel, **kwargs))

    return asyncio.run(scenario()), channel


def frames(*objects: object) -> str:
    """A shell command printing one JSON frame per line."""
    return "; ".join(f"printf '%s\\n' '{json.dumps(o)}'" for o in objects)


def test_the_request_is_one_line_with_the_protocol_items_and_limits() -> None:
    """The first stdin line: the plain document plus protocol, items decoded, limits."""
    command = (
        "read -r request; "
        'printf \'{"type":"result","text":%s}\\n\' "$(printf %s "$request" | jq -R .)"'
    )
    outcome, _ = run(command, parameters={"temperature": "0"}, attempt=2)
    assert outcome.succeeded, outcome
    request = json.loads(outcome.output)
    assert request["protocol"] == "turnwire.framed.v1"
    assert (request["operation_id"], request["attempt"], request["executor"]) == (
        "op-1",
        2,
        "default",
    )
    assert [(i["role"], i["text"]) for i in request["items"]] == [
        ("user", "hello "),
        ("user", "world"),
    ]
    assert request["envelope"]["model"]["parameters"] == {"temperature": "0"}
    assert request["limits"]["max_chunk_bytes"] == 16
    assert request["limits"]["stream_budget_bytes"] == 64
    assert request["limits"]["max_frame_bytes"] == 2 * 1024 * 1024


def test_good_frames_stream_chunks_count_heartbeats_and_end_with_the_result() -> None:
    """Chunks (text and base64) reach the stream in order; every frame is a
    heartbeat; an unknown frame type is ignored; result + exit 0 succeeds."""
    command = frames(
        {"type": "chunk", "text": "Hel"},
        {"type": "heartbeat"},
        {"type": "progress", "percent": 50},
        {"type": "chunk", "base64": "bG8=", "content_type": "text/x-piece"},
        {"type": "result", "text": "Hello", "metadata": {"tokens": "2"}},
    )
    outcome, channel = run(command)
    assert outcome.succeeded and outcome.output == b"Hello"
    assert outcome.metadata == {"tokens": "2", "exit_code": "0"}
    assert [(c.offset, c.data, c.content_type) for c in channel.chunks] == [
        (1, b"Hel", "text/plain; charset=utf-8"),
        (2, b"lo", "text/x-piece"),
    ]
    assert channel.heartbeats == 5  # every frame, the unknown one too


def test_a_malformed_frame_kills_the_group_and_fails_result_invalid(tmp_path: Path) -> None:
    """A line that is not a frame: the group is killed at once, RESULT_INVALID
    naming the line; nothing after it is read."""
    child = tmp_path / "child.pid"
    command = f"sleep 600 & echo $! > {child}; " + frames({"type": "heartbeat"})
    command += "; echo 'not json'; sleep 600"
    outcome, _ = run(command)
    assert outcome.error_reason == "RESULT_INVALID"
    assert "stdout line 2: not JSON" in outcome.error_message
    pid = int(child.read_text())
    try:
        assert gone_within(pid)
    finally:
        end_processes(pid)


def test_a_known_frame_with_a_bad_field_is_a_protocol_error() -> None:
    outcome, _ = run(frames({"type": "chunk", "text": 7}))
    assert outcome.error_reason == "RESULT_INVALID"
    assert '"text"' in outcome.error_message


def test_a_frame_over_the_limit_is_a_protocol_error() -> None:
    """A line past MAX_FRAME_BYTES without its newline: killed, RESULT_INVALID."""
    outcome, _ = run("head -c 3000000 /dev/zero | tr '\\0' a; sleep 600")
    assert outcome.error_reason == "RESULT_INVALID"
    assert "a frame over 2097152 bytes" in outcome.error_message


def test_a_frame_after_the_final_frame_is_a_protocol_error() -> None:
    outcome, _ = run(frames({"type": "result", "text": "a"}, {"type": "heartbeat"}))
    assert outcome.error_reason == "RESULT_INVALID"
    assert "after the final frame" in outcome.error_message


@pytest.mark.rule("R13")
def test_a_refused_chunk_is_told_on_stdin_and_the_turn_goes_on() -> None:
    """R13: a chunk over the limit is dropped, the command reads a refused notice
    on stdin, and its result still counts."""
    command = (
        "read -r request; "
        + frames({"type": "chunk", "text": "x" * 40})
        + "; read -r notice; "
        + 'printf \'{"type":"result","text":%s}\\n\' "$(printf %s "$notice" | jq -R .)"'
    )
    outcome, channel = run(command)
    assert outcome.succeeded, outcome
    notice = json.loads(outcome.output)
    assert (notice["type"], notice["reason"], notice["frame"]) == ("refused", "CHUNK_TOO_LARGE", 1)
    assert channel.chunks == []


def test_exit_codes_declare_the_effect_when_no_final_frame_came() -> None:
    """75: failed, nothing took effect (retryable); 76: failed after an effect;
    0 without a result frame: RESULT_INVALID; any other: failed, undeclared."""
    cases = {
        "exit 75": ("EXECUTOR_FAILED", "NONE"),
        "exit 76": ("EXECUTOR_FAILED", "APPLIED"),
        "exit 0": ("RESULT_INVALID", ""),
        "echo 'quota gone' >&2; exit 3": ("EXECUTOR_FAILED", ""),
    }
    for command, (reason, effect) in cases.items():
        outcome, _ = run(command)
        got = (outcome.error_reason, outcome.effect)
        assert got == (reason, effect), command
    outcome, _ = run("echo 'quota gone' >&2; exit 3")
    assert "exit status 3; stderr: quota gone" in outcome.error_message


def test_an_error_frame_declares_its_effect_and_retry_hint() -> None:
    command = frames(
        {"type": "error", "message": "429 from upstream", "effect": "none", "retry_after": 2}
    )
    outcome, _ = run(command + "; exit 1")
    assert (outcome.error_reason, outcome.effect, outcome.retry_after) == (
        "EXECUTOR_FAILED",
        "NONE",
        2.0,
    )
    assert outcome.error_message == "429 from upstream"


def test_sigterm_lets_the_command_declare_its_effect_then_sigkill_ends_the_rest(
    tmp_path: Path,
) -> None:
    """On a stop the group gets SIGTERM: the command may answer with an error frame
    (its declared effect is kept); once it exits, whatever it left in its group
    (here a process ignoring SIGTERM) is SIGKILLed."""
    stubborn = tmp_path / "stubborn.pid"
    command = (
        f"sh -c 'trap \"\" TERM; echo $$ > {stubborn}; exec sleep 600' & "
        "stop() { "
        + frames({"type": "error", "message": "stopped", "effect": "none"})
        + "; exit 75; }; trap stop TERM; "
        + frames({"type": "chunk", "text": "working"})
        + "; while :; do sleep 0.05; done"
    )
    channel = Recording()
    pids: list[int] = []

    async def scenario() -> object:
        handle = await start(command, channel)
        pids.append(handle.pid)
        pids.append(await read_pid_file(stubborn))
        await until_framed(channel)  # its trap is set before its first frame
        await handle.cancel(grace_seconds=1.0)
        return await settle(handle)

    try:
        outcome = asyncio.run(scenario())
        assert outcome.error_reason == "CANCELLED"
        assert outcome.effect == "NONE"
        assert [c.data for c in channel.chunks] == [b"working"]
        assert all(gone_within(pid) for pid in pids)
    finally:
        end_processes(*pids)


def test_a_command_that_ignores_sigterm_is_sigkilled_after_the_grace_effect_unknown() -> None:
    """SIGKILL after the grace: the command could say nothing, so nothing is declared."""
    channel = Recording()

    async def scenario() -> object:
        command = (
            "trap '' TERM; " + frames({"type": "heartbeat"}) + "; while :; do sleep 0.05; done"
        )
        handle = await start(command, channel)
        await until_framed(channel)  # its trap is set before its first frame
        await handle.cancel(grace_seconds=0.3)
        return await settle(handle)

    outcome = asyncio.run(scenario())
    assert outcome.error_reason == "CANCELLED"
    assert "killed by signal SIGKILL" in outcome.error_message
    assert outcome.effect == ""


def test_a_command_behind_a_shell_gets_the_grace_to_report_after_its_leader_exits() -> None:
    """A stop's SIGTERM ends the wrapping shell at once; the command it started, still
    handling its own SIGTERM, gets the rest of the grace to send its error frame
    (here: effect applied) before the group is SIGKILLed. Regression: the group was
    killed the moment the leader exited, and the declared effect was lost."""
    child = (
        "stop() { sleep 0.3; "
        + frames({"type": "error", "message": "billed, then stopped", "effect": "applied"})
        + "; exit 76; }; trap stop TERM; "
        + frames({"type": "heartbeat"})
        + "; while :; do sleep 0.05; done"
    )
    channel = Recording()

    async def scenario() -> ExecutionOutcome:
        handle = await start(f"sh -c {shlex.quote(child)} & wait", channel)
        await until_framed(channel)
        await handle.cancel(grace_seconds=5.0)
        return await settle(handle)

    outcome = asyncio.run(scenario())
    assert (outcome.error_reason, outcome.effect) == ("CANCELLED", "APPLIED")
