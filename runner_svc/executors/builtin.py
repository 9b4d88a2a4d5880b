"""Built-in test executors: echo, sleep and fail (PROTOCOL.md R10).

They read their knobs from the envelope's `model.parameters`:

- "sleep_ms": sleep this many milliseconds before settling (cancellable);
  the default is 0 for echo and fail, 1000 for sleep.
- "fail": "1" or "true" makes the execution fail with EXECUTOR_FAILED;
  "0", "false" or absent does not. The fail executor always fails.
- "fail_executions": "N" makes the first N executions of the turn fail with
  EXECUTOR_FAILED and declared effect NONE (as a provider's 429 would: nothing
  took effect), so a retry policy (R15) retries them; later ones run normally.
- "output": the text to return (UTF-8, text/plain). Without it the output is
  the concatenated `content` of the envelope's input items.

A knob that does not parse makes `start` raise ExecutorStartError (nothing ran).
A cancelled execution settles with error_reason "CANCELLED".
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from runner_svc.executors.base import ExecutionOutcome, ExecutionRequest, ExecutorStartError
from runner_svc.executors.in_process import InProcessExecution, start_in_process
from runner_svc.executors.outcomes import (
    EXECUTOR_FAILED,
    OCTET_STREAM,
    TEXT_PLAIN,
    failed,
    succeeded,
)
from turnwire.runner.v1 import runner_pb2

_TRUE = frozenset({"1", "true"})
_FALSE = frozenset({"", "0", "false"})


@dataclass(frozen=True)
class BuiltinKnobs:
    """What a built-in executor does for one envelope."""

    sleep_ms: int
    fail: bool
    output: str | None
    # R15: the first this many executions fail with declared effect NONE.
    fail_executions: int = 0


def read_knobs(
    envelope: runner_pb2.TurnEnvelope, *, default_sleep_ms: int, always_fail: bool
) -> BuiltinKnobs:
    """Parse the knobs from model.parameters; ValueError names a bad one."""
    parameters = envelope.model.parameters
    raw_sleep = parameters.get("sleep_ms")
    sleep_ms = default_sleep_ms if raw_sleep is None else _parse_sleep_ms(raw_sleep)
    raw_fail = parameters.get("fail", "").strip().lower()
    if raw_fail not in _TRUE | _FALSE:
        raise ValueError(f'parameter "fail" must be "1", "0", "true" or "false", got {raw_fail!r}')
    output = parameters.get("output")
    raw_executions = parameters.get("fail_executions", "0").strip() or "0"
    if not raw_executions.isdigit():
        raise ValueError(f'parameter "fail_executions" must be a count, got {raw_executions!r}')
    return BuiltinKnobs(
        sleep_ms=sleep_ms,
        fail=always_fail or raw_fail in _TRUE,
        output=output,
        fail_executions=int(raw_executions),
    )


def _parse_sleep_ms(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f'parameter "sleep_ms" must be an integer, got {raw!r}') from None
    if value < 0:
        raise ValueError(f'parameter "sleep_ms" must not be negative, got {value}')
    return value


def settle(
    envelope: runner_pb2.TurnEnvelope, knobs: BuiltinKnobs, execution: int = 1
) -> ExecutionOutcome:
    """The outcome the knobs ask for (pure); ``execution``: this execution's number."""
    if execution <= knobs.fail_executions:
        return replace(
            failed(EXECUTOR_FAILED, f"refused on request (execution {execution}, no effect)"),
            effect="NONE",
        )
    if knobs.fail:
        return failed(EXECUTOR_FAILED, 'failed on request (parameter "fail")')
    if knobs.output is not None:
        return succeeded(knobs.output.encode(), TEXT_PLAIN)
    items = envelope.input_items
    content_types = {item.content_type for item in items}
    content_type = content_types.pop() if len(content_types) == 1 else OCTET_STREAM
    return succeeded(b"".join(item.content for item in items), content_type or OCTET_STREAM)


async def run_builtin(request: ExecutionRequest, knobs: BuiltinKnobs) -> InProcessExecution:
    """Start the built-in behaviour for already-parsed knobs."""

    async def work() -> ExecutionOutcome:
        if knobs.sleep_ms:
            await asyncio.sleep(knobs.sleep_ms / 1000)
        return settle(request.envelope, knobs, request.execution)

    return await start_in_process(work, name=f"builtin:{request.operation_id}", interruptible=True)


class BuiltinExecutor:
    """echo, sleep or fail: the same behaviour with different defaults."""

    def __init__(self, name: str, *, default_sleep_ms: int, always_fail: bool) -> None:
        self.name = name
        self._default_sleep_ms = default_sleep_ms
        self._always_fail = always_fail

    def knobs_for(self, request: ExecutionRequest) -> BuiltinKnobs:
        """The knobs for a request, or ExecutorStartError when one is bad."""
        try:
            return read_knobs(
                request.envelope,
                default_sleep_ms=self._default_sleep_ms,
                always_fail=self._always_fail,
            )
        except ValueError as error:
            raise ExecutorStartError(f"{self.name}: {error}") from error

    async def start(self, request: ExecutionRequest) -> InProcessExecution:
        return await run_builtin(request, self.knobs_for(request))


def echo() -> BuiltinExecutor:
    """Returns the input (or "output") at once, unless the knobs say otherwise."""
    return BuiltinExecutor("echo", default_sleep_ms=0, always_fail=False)


def sleep() -> BuiltinExecutor:
    """Sleeps "sleep_ms" (default 1000 ms), then behaves like echo."""
    return BuiltinExecutor("sleep", default_sleep_ms=1000, always_fail=False)


def fail() -> BuiltinExecutor:
    """Always fails with EXECUTOR_FAILED (after "sleep_ms", default 0)."""
    return BuiltinExecutor("fail", default_sleep_ms=0, always_fail=True)
