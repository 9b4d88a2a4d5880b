"""The subprocess executor: a shell command per turn (PROTOCOL.md R10).

Two forms. ``subprocess+framed:<shell command>`` speaks the framed protocol
(runner_svc/executors/frames.py, docs/EXECUTORS.md): the request as one line
on stdin, then chunks, heartbeats and the result as JSON frames on stdout,
exit codes 75/76 for declared effects. ``subprocess:<shell command>`` is the
original "stdout is the result" form, described below and unchanged: its
stdout is never read as frames, so a command written for it keeps its meaning.

`subprocess:<shell command>` runs `/bin/sh -c <shell command>` in a NEW process
group and session (start_new_session=True), with this JSON object on stdin
(then stdin is closed):

    {
      "operation_id": "<id>",
      "incarnation_id": "<32 hex>",
      "attempt": 1,
      "envelope": { ... }
    }

`envelope` is the TurnEnvelope in proto3 JSON form with the proto field names
(google.protobuf.json_format.MessageToDict(envelope,
preserving_proto_field_name=True)): snake_case keys, bytes as base64, fields
at their default value left out. `json_format.ParseDict(obj["envelope"],
TurnEnvelope())` reads it back.

The result:
- exit status 0: success; the output is stdout (application/octet-stream),
  metadata {"exit_code": "0"};
- any other exit: EXECUTOR_FAILED with the exit status and the tail of stderr;
- stdout over MAX_OUTPUT_BYTES (1 MiB): the group is SIGKILLed and the turn
  fails with RESULT_INVALID;
- after a cancel, any end but exit 0 is CANCELLED.

Cancel sends SIGTERM to the whole process group, then SIGKILL to the group
once `grace_seconds` have passed if the leader has not exited. When the
leader exits, whatever it left running in its group is SIGKILLed before the
outcome is reported, so a settled turn leaves nothing running (R6). The
leader is watched through a pidfd and reaped only after that, so its pid (the
group id) cannot be reused by another process while we signal the group.
A process that leaves the group (setsid) escapes this; if it keeps stdout
open, reading stops STRAGGLER_DRAIN_SECONDS after the leader's exit.

The group never outlives the runner (runner_svc/executors/groups.py): the
leader gets PR_SET_PDEATHSIG=SIGKILL, the runner's watchdog process SIGKILLs
the group if the runner dies, and the handle's `process` (group id, leader
start time, boot id) is recorded in the store at launch so the next
incarnation ends whatever is left before it serves. The command's
environment carries TURNWIRE_EXECUTOR=<incarnation_id>/<operation_id>, and
TRACEPARENT (and TRACESTATE) when the turn has a trace context to continue
(docs/TRACING.md).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Coroutine
from typing import Any

from google.protobuf import json_format

from runner_svc import fork_safety
from runner_svc.executors import frames, groups, pipes
from runner_svc.executors.base import (
    ExecutionOutcome,
    ExecutionRequest,
    ExecutorProcess,
    ExecutorStartError,
)
from runner_svc.executors.outcomes import (
    EXECUTOR_FAILED,
    MAX_OUTPUT_BYTES,
    OCTET_STREAM,
    RESULT_INVALID,
    cancelled,
    describe_exception,
    failed,
    succeeded,
)
from runner_svc.executors.watchdog import WATCHDOG
from turnwire.common.v1 import turn_pb2
from turnwire.executor.context import TurnChannel

STDERR_TAIL_BYTES = 4096
STRAGGLER_DRAIN_SECONDS = 2.0


def stdin_payload(request: ExecutionRequest) -> bytes:
    """The JSON document the command reads on stdin (shape in the module docstring)."""
    envelope = json_format.MessageToDict(request.envelope, preserving_proto_field_name=True)
    document = {
        "operation_id": request.operation_id,
        "incarnation_id": request.incarnation_id,
        "attempt": request.attempt,
        "envelope": envelope,
    }
    return json.dumps(document, separators=(",", ":")).encode()


def framed_payload(request: ExecutionRequest) -> bytes:
    """The framed protocol's request line: the document above, the input items
    decoded (text when UTF-8, else base64), the turn's limits and the runner's
    output limits (frames.py)."""
    document = json.loads(stdin_payload(request))
    limits, stream = request.envelope.limits, request.stream_limits
    document.update(
        protocol=frames.PROTOCOL,
        executor=request.executor,
        # R15: this execution's number in the row (a retry after a failure
        # declared "none" is 2, 3, ...); "attempt" stays the Dispatch attempt.
        execution=request.execution,
        items=[_item(item) for item in request.envelope.input_items],
        limits={
            "deadline": limits.deadline.seconds + limits.deadline.nanos / 1e9
            if limits.HasField("deadline")
            else None,
            "budget_ms": limits.budget_ms or None,
            "heartbeat_timeout_ms": limits.heartbeat_timeout.ToMilliseconds() or None
            if limits.HasField("heartbeat_timeout")
            else None,
            "max_chunk_bytes": stream.max_chunk_bytes,
            "stream_budget_bytes": stream.turn_budget_bytes,
            "max_frame_bytes": frames.MAX_FRAME_BYTES,
            "max_result_bytes": MAX_OUTPUT_BYTES,
        },
    )
    return json.dumps(document, separators=(",", ":")).encode() + b"\n"


def _item(item: turn_pb2.InputItem) -> dict[str, str]:
    decoded = {"item_id": item.item_id, "role": item.role, "content_type": item.content_type}
    try:
        decoded["text"] = item.content.decode()
    except UnicodeDecodeError:
        decoded["base64"] = base64.b64encode(item.content).decode()
    return decoded


_TRACE_VARIABLES = ("TRACEPARENT", "TRACESTATE")


def command_environment(request: ExecutionRequest, marker: str) -> dict[str, str]:
    """The runner's environment (gRPC's fork switch as the operator set it,
    runner_svc/fork_safety.py) plus the group marker and the turn's
    TRACEPARENT / TRACESTATE (OpenTelemetry's environment carrier), so the
    command continues the turn's trace (docs/TRACING.md). The runner's own
    trace variables are never passed on: they would name another trace."""
    env = {name: value for name, value in os.environ.items() if name not in _TRACE_VARIABLES}
    fork_safety.as_the_operator_set_it(env)
    carried = (request.traceparent, request.tracestate)
    for name, value in zip(_TRACE_VARIABLES, carried, strict=True):
        if value:
            env[name] = value
    env[groups.MARKER_VARIABLE] = marker
    return env


class SubprocessExecutor:
    """Runs a shell command per execution (see the module docstring)."""

    def __init__(self, command: str, *, framed: bool = False) -> None:
        if not command.strip():
            raise ValueError("the subprocess executor needs a non-empty shell command")
        if not hasattr(os, "pidfd_open"):
            raise ValueError("the subprocess executor needs Linux >= 5.3 (os.pidfd_open)")
        self.command = command
        self.framed = framed
        self.name = "subprocess+framed" if framed else "subprocess"
        self._boot_id = groups.boot_id()

    async def start(self, request: ExecutionRequest) -> ProcessExecution:
        payload = framed_payload(request) if self.framed else stdin_payload(request)
        marker = groups.executor_marker(request.incarnation_id, request.operation_id)
        try:
            # Popen returns once /bin/sh has been exec'd: the work has started (R3).
            # It blocks for the fork+exec only (milliseconds); a thread would
            # orphan the process if this start were cancelled meanwhile, and the
            # death signal fires when the forking thread ends: this is the loop's.
            process = subprocess.Popen(  # noqa: ASYNC220
                self.command,
                shell=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                env=command_environment(request, marker),
                preexec_fn=groups.death_signal_preexec(),
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise ExecutorStartError(
                f"subprocess: cannot start {self.command!r}: {error}"
            ) from error
        # Unreaped, the leader's pid is still its own: its /proc entry is the one we started.
        stat = groups.read_stat(process.pid)
        identity = ExecutorProcess(process.pid, stat.start_time if stat else 0, self._boot_id)
        WATCHDOG.add(process.pid, identity.start_time, marker)
        channel = request.channel if self.framed else None
        return ProcessExecution(process, payload, identity, channel=channel)


class ProcessExecution:
    """One running command: its process group, pipes and settlement."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        payload: bytes,
        identity: ExecutorProcess | None = None,
        *,
        channel: TurnChannel | None = None,
    ) -> None:
        self.pid = process.pid  # also the process group id (new session)
        # Set: the command speaks the framed protocol, its frames go to this channel.
        self._channel = channel
        self.process = identity  # recorded at launch (R10: never outlive the runner)
        self._process = process
        self._reaped = False
        self._cancel_requested = False
        self._escalation: asyncio.TimerHandle | None = None
        self._kill_at = 0.0  # the loop time the grace after a cancel ends (SIGKILL)
        self._task = asyncio.create_task(self._run(payload), name=f"subprocess:{self.pid}")

    async def wait(self) -> ExecutionOutcome:
        await asyncio.wait({self._task})  # a caller's cancellation never stops the run
        if self._task.cancelled():  # only at event-loop shutdown; the group was killed
            return cancelled("the runner's event loop stopped the execution")
        error = self._task.exception()
        if error is not None:
            return failed(
                EXECUTOR_FAILED, f"subprocess executor error: {describe_exception(error)}"
            )
        return self._task.result()

    async def cancel(self, grace_seconds: float) -> None:
        if self._cancel_requested or self._reaped:
            return
        self._cancel_requested = True
        self._signal_group(signal.SIGTERM)
        loop = asyncio.get_running_loop()
        self._kill_at = loop.time() + max(grace_seconds, 0.0)
        self._escalation = loop.call_at(self._kill_at, self._signal_group, signal.SIGKILL)

    def _grace_left(self) -> float:
        return max(0.0, self._kill_at - asyncio.get_running_loop().time())

    def _signal_group(self, signum: signal.Signals) -> None:
        # Once the leader is reaped its pid may be reused: never signal then.
        if self._reaped:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    async def _run(self, payload: bytes) -> ExecutionOutcome:
        process = self._process
        assert process.stdin and process.stdout and process.stderr  # all three are pipes
        framed = None
        if self._channel is not None:
            stdin_fd = process.stdin.fileno()
            framed = frames.FramedRun(
                self._channel, lambda line: pipes.write_whole_or_drop(stdin_fd, line)
            )
        # Framed: stdin stays open after the request, for the runner's notices.
        feeder = asyncio.create_task(pipes.feed(process.stdin, payload, close=framed is None))
        reading: Coroutine[Any, Any, object] = (
            pipes.read_bounded(process.stdout, MAX_OUTPUT_BYTES)
            if framed is None
            else frames.read_framed(process.stdout, framed)
        )
        stdout = asyncio.create_task(reading)
        stderr = asyncio.create_task(pipes.read_tail(process.stderr, STDERR_TAIL_BYTES))
        try:
            aborted = await self._until_exit_or_abort(stdout, framed)
            if self._cancel_requested and not aborted:
                # Stopped: what the leader left in its group (the command behind a
                # shell wrapper, still handling its SIGTERM) gets the rest of the
                # grace to finish and say what took effect, then SIGKILL.
                await asyncio.wait({stdout}, timeout=self._grace_left())
            self._signal_group(signal.SIGKILL)  # the leader is gone: end its stragglers
            returncode = self._reap()
            await asyncio.wait({stdout, stderr}, timeout=STRAGGLER_DRAIN_SECONDS)
        finally:
            for task in (feeder, stdout, stderr):
                task.cancel()
            await asyncio.wait({feeder, stdout, stderr})
            process.stdin.close()
            self._force_reap()
        tail = b"" if stderr.cancelled() else stderr.result()
        if framed is not None:
            detail = self._exit_detail(returncode, tail)
            return frames.framed_outcome(framed, returncode, detail, self._cancel_requested)
        output = b"" if stdout.cancelled() else stdout.result()
        assert isinstance(output, bytes)
        return self._outcome(returncode, aborted, output, tail)

    async def _until_exit_or_abort(
        self, stdout: asyncio.Task[object], framed: frames.FramedRun | None
    ) -> bool:
        """Wait for the leader to exit (unreaped). True if stdout went over the limit
        (plain) or broke the protocol (framed): the group is killed at once."""
        exited = asyncio.create_task(pipes.until_exited(self.pid))
        try:
            await asyncio.wait({exited, stdout}, return_when=asyncio.FIRST_COMPLETED)
            aborted = stdout.done() and (
                framed.malformed is not None
                if framed is not None
                else len(stdout.result()) > MAX_OUTPUT_BYTES  # type: ignore[arg-type]
            )
            if aborted:
                self._signal_group(signal.SIGKILL)
            await exited
        finally:
            exited.cancel()
        return aborted

    def _reap(self) -> int:
        WATCHDOG.remove(self.pid)  # before the pid may be reused
        returncode = self._process.wait()  # the leader has exited: this does not block
        self._reaped = True
        if self._escalation is not None:
            self._escalation.cancel()
        return returncode

    def _force_reap(self) -> None:
        """On an unexpected error, never leave the group running or the leader unreaped."""
        if not self._reaped:
            self._signal_group(signal.SIGKILL)
            self._reap()

    def _outcome(
        self, returncode: int, overflowed: bool, output: bytes, stderr_tail: bytes
    ) -> ExecutionOutcome:
        metadata = {"exit_code": str(returncode)}
        if overflowed:
            limit = MAX_OUTPUT_BYTES
            return failed(RESULT_INVALID, f"stdout exceeded {limit} bytes", metadata)
        if returncode == 0:
            return succeeded(output[:MAX_OUTPUT_BYTES], OCTET_STREAM, metadata)
        message = self._exit_detail(returncode, stderr_tail)
        if self._cancel_requested:
            return cancelled(f"cancelled: {message}")
        return failed(EXECUTOR_FAILED, message, metadata)

    @staticmethod
    def _exit_detail(returncode: int, stderr_tail: bytes) -> str:
        detail = _describe_exit(returncode)
        tail = stderr_tail.decode(errors="replace").strip()
        return f"{detail}; stderr: {tail}" if tail else detail


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        return f"killed by signal {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"
