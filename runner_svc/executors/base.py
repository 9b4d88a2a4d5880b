"""The executor port (PROTOCOL.md R10, R3, R6).

An executor runs one turn. The runner core drives it through two calls:
`Executor.start` returns once the work has really started (the R3
start-confirmation point: the runner writes its start confirmation after it
returns, and its launch intent before calling it), and the returned
`ExecutionHandle` settles the turn (`wait`) or asks it to stop (`cancel`).

Executors never see the runner's store (R10): they get the request, nothing else.
The request's ``channel`` carries what an execution sends back while it runs:
output chunks (R13) and heartbeats (R12).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from turnwire.executor.context import TurnChannel
from turnwire.executor.outcomes import OutputRefused
from turnwire.output_stream import STREAM_CLOSED, StreamLimits
from turnwire.runner.v1 import runner_pb2


class NoChannel:
    """A channel for an execution nobody streams from (tests, tools): every chunk
    is refused as if the stream were closed; heartbeats are dropped."""

    def emit(self, data: bytes, content_type: str) -> int:
        raise OutputRefused(STREAM_CLOSED, "this execution has no output stream")

    def heartbeat(self) -> None:
        return None


@dataclass(frozen=True)
class ExecutionRequest:
    """One execution of one turn, as the executor sees it."""

    operation_id: str
    incarnation_id: str
    # The coordinator's Dispatch attempt that admitted the row (the ledger's).
    attempt: int
    envelope: runner_pb2.TurnEnvelope  # parsed from envelope_bytes
    envelope_bytes: bytes
    # The W3C trace context the execution continues (docs/TRACING.md): the
    # runner's span while it traces, else the envelope's as the caller gave
    # it; empty when there is none. The subprocess executor sets TRACEPARENT
    # and TRACESTATE from them.
    traceparent: str = ""
    tracestate: str = ""
    # Output chunks and heartbeats back to the runner (R12, R13).
    channel: TurnChannel = field(default_factory=NoChannel)
    # The executor's name on this runner ("default" unless the envelope names one).
    executor: str = "default"
    # The runner's bounds on streamed output (R13), told to framed subprocesses.
    stream_limits: StreamLimits = field(default_factory=StreamLimits)
    # This execution's number in the row: 1, then 2, 3, ... for each retry of a
    # failure declared effect NONE (PROTOCOL.md R15). What ctx.attempt says.
    execution: int = 1


@dataclass(frozen=True)
class ExecutionOutcome:
    """How an execution settled.

    `error_reason` is an ErrorReason string (errors.proto, without the
    "ERROR_REASON_" prefix), e.g. "EXECUTOR_FAILED" or "RESULT_INVALID"; it is
    empty when `succeeded`.
    """

    succeeded: bool
    output: bytes = b""
    content_type: str = ""
    error_reason: str = ""
    error_message: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    # A failure's declared effect downstream: "" (undeclared), "NONE" or "APPLIED";
    # with NONE, seconds until a retry may help (docs/EXECUTORS.md).
    effect: str = ""
    retry_after: float | None = None


@dataclass(frozen=True)
class ExecutorProcess:
    """An execution's OS process group, as the runner records it at launch (R10).

    A handle that runs in its own process group exposes one as ``process``; the
    runner writes it to its store so the next incarnation can end the group if
    this runner dies before it settles (runner_svc/executor_sweep.py).
    """

    pgid: int  # the process group (and session) id: the leader's pid
    start_time: int  # the leader's start time, clock ticks after boot (/proc/<pid>/stat)
    boot_id: str  # /proc/sys/kernel/random/boot_id when it was started


class ExecutorStartError(Exception):
    """The executor could not start: nothing ran (the turn is provably not started)."""


class ExecutionHandle(Protocol):
    """A started execution."""

    async def wait(self) -> ExecutionOutcome:
        """Return once the execution has settled.

        Never raises for an executor failure: that is `succeeded=False`. May be
        awaited more than once; every call returns the same outcome.
        """
        ...

    async def cancel(self, grace_seconds: float) -> None:
        """Ask the execution to stop; `wait()` then settles (R6: the slot is freed then).

        Returns without waiting for the settlement. Idempotent; a no-op once settled.
        """
        ...


class SettledAtOnce(Protocol):
    """Optional on a handle: its outcome without waiting, once it has settled.

    A handle whose work may be over by the time ``Executor.start`` returns (an
    in-process turn that needed no wait) can say so; the runner then writes the
    settlement with no separate start confirmation (R3).
    """

    def outcome_now(self) -> ExecutionOutcome | None:
        """The outcome ``wait()`` would return at once, or None while it runs."""
        ...


def outcome_if_settled(handle: ExecutionHandle) -> ExecutionOutcome | None:
    """The handle's outcome if it has settled and can say so without waiting."""
    outcome_now = getattr(handle, "outcome_now", None)
    if not callable(outcome_now):
        return None
    outcome: ExecutionOutcome | None = outcome_now()
    return outcome


class Executor(Protocol):
    """Starts executions of turns."""

    name: str

    async def start(self, request: ExecutionRequest) -> ExecutionHandle:
        """Start the work; return once it has really started (R3).

        Raises ExecutorStartError when nothing was started.
        """
        ...
