"""The callable executor: a Python function per turn (PROTOCOL.md R10). Deprecated.

Deprecated for ``python:<module>:<function>`` (runner_svc/executors/python_api.py),
whose function gets a turnwire.executor.TurnContext: decoded items, limits,
cancellation, emit() and heartbeat(). This older form hands the function the
runner's internal ExecutionRequest (a protobuf TurnEnvelope inside), which is
not a stable interface; it keeps working unchanged, and the runner logs a
warning naming the replacement when it loads one.

`callable:<module>:<function>` imports `module` and takes its attribute
`function` at load time (a missing module or function is a ValueError then,
not a failure at the first turn). The function is called with the
ExecutionRequest and returns:

- bytes: success, content type application/octet-stream;
- str: success, UTF-8 encoded, text/plain; charset=utf-8;
- an ExecutionOutcome: used as it is (output still bounded by 1 MiB);
- anything else: RESULT_INVALID.

Raising an exception fails the turn with EXECUTOR_FAILED and the exception's
type and text as the message.

`async def` functions run as a task on the runner's event loop; cancel
cancels that task (the outcome is CANCELLED unless the function swallows the
cancellation and returns a result, which is then reported as it is).

The request carries the turn's W3C trace context (``request.traceparent``,
``request.tracestate``), and the function runs in the runner's context: with
tracing on, OpenTelemetry's current span is the turn's execution span, so a
span the function starts continues the turn's trace (docs/TRACING.md).

Plain functions run in a dedicated thread so they cannot stall the loop.
Python cannot interrupt a thread: cancel is recorded but the function runs
on, and `wait()` settles only when it returns (so the runner frees the slot
only then, R6). Write long-running work as `async def` to make it cancellable.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
from collections.abc import Callable
from typing import Any

from runner_svc.executors.base import ExecutionOutcome, ExecutionRequest
from runner_svc.executors.in_process import InProcessExecution, start_in_process
from runner_svc.executors.outcomes import (
    EXECUTOR_FAILED,
    OCTET_STREAM,
    RESULT_INVALID,
    TEXT_PLAIN,
    describe_exception,
    failed,
    succeeded,
)
from turnwire.executor.running import in_thread

log = logging.getLogger("runner_svc.executors")

TurnFunction = Callable[[ExecutionRequest], Any]


def import_function(target: str) -> TurnFunction:
    """`module:function` → the function; ValueError with the reason when that fails."""
    module_name, sep, function_name = target.partition(":")
    if not sep or not module_name or not function_name or ":" in function_name:
        raise ValueError(f"expected <module>:<function>, got {target!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import module {module_name!r}: {error}") from error
    function = getattr(module, function_name, None)
    if function is None:
        raise ValueError(f"module {module_name!r} has no attribute {function_name!r}")
    if not callable(function):
        raise ValueError(f"{target!r} is not callable")
    return function  # type: ignore[no-any-return]


def outcome_from_return(value: object) -> ExecutionOutcome:
    """What a function's return value means (see the module docstring)."""
    if isinstance(value, ExecutionOutcome):
        if not value.succeeded:
            return value
        return succeeded(value.output, value.content_type, dict(value.metadata))
    if isinstance(value, bytes):
        return succeeded(value, OCTET_STREAM)
    if isinstance(value, str):
        return succeeded(value.encode(), TEXT_PLAIN)
    return failed(RESULT_INVALID, f"the function returned {type(value).__name__}, not bytes or str")


class CallableExecutor:
    """Calls one Python function per execution."""

    name = "callable"

    def __init__(self, function: TurnFunction, *, target: str = "") -> None:
        self.function = function
        self.target = target or getattr(function, "__qualname__", repr(function))
        self._is_async = inspect.iscoroutinefunction(function)
        if target:
            log.warning(
                "executor callable:%s is deprecated: its function gets the runner's internal "
                "ExecutionRequest; take a turnwire.executor.TurnContext instead and serve it "
                "as python:%s (docs/EXECUTORS.md)",
                target,
                target,
            )

    async def start(self, request: ExecutionRequest) -> InProcessExecution:
        name = f"callable:{self.target}:{request.operation_id}"
        if self._is_async:
            return await start_in_process(
                lambda: self._call_async(request), name=name, interruptible=True
            )
        return await start_in_process(
            lambda: self._call_in_thread(request, name), name=name, interruptible=False
        )

    async def _call_async(self, request: ExecutionRequest) -> ExecutionOutcome:
        try:
            value = await self.function(request)
        except Exception as error:
            return failed(EXECUTOR_FAILED, describe_exception(error))
        return outcome_from_return(value)

    async def _call_in_thread(self, request: ExecutionRequest, name: str) -> ExecutionOutcome:
        # The caller's context goes with it (a thread starts with none), so the
        # function's OpenTelemetry current span is the turn's (docs/TRACING.md).
        try:
            value = await in_thread(name, lambda: self.function(request))
        except asyncio.CancelledError:
            raise  # this task was cancelled (the loop is stopping), not the function
        except BaseException as error:  # whatever it raises is the turn's failure
            return failed(EXECUTOR_FAILED, describe_exception(error))
        return outcome_from_return(value)
