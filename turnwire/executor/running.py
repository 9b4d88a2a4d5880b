"""Calling an executor function with its context: one ``FunctionRun`` per execution.

``async def`` functions run as a task on the caller's event loop; plain
functions on a dedicated thread (a shared pool could be starved by long
turns), with the caller's context variables (the turn's log fields, the
OpenTelemetry span), so they cannot stall the loop.

Stopping (``stop()``): the context's ``cancelled`` event is set first, so both
kinds can see it; an async function's task is then cancelled as well (it gets
``CancelledError`` at its next ``await``, and its ``finally`` blocks run).
Python cannot interrupt a thread: a plain function stops when it looks at
``ctx.cancelled`` or calls ``ctx.check_cancelled()``, and its run settles only
when it returns (the runner frees the slot only then, R6). Work that must be
killable at any instant belongs in a subprocess executor.

Used by the runner (runner_svc/executors/python_api.py) and by
turnwire.executor.testing, so both run a function the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Callable
from typing import Any

from turnwire.executor.context import TurnContext
from turnwire.executor.outcomes import Outcome, outcome_of_error, outcome_of_return

ExecutorFunction = Callable[[TurnContext], Any]


def is_async(function: object) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004 - a callable object's method
    )


async def in_thread(name: str, call: Callable[[], Any]) -> Any:
    """Run ``call`` on a new daemon thread with the caller's context variables;
    await its return value (or its exception). Daemon: a function that never
    returns cannot block the process's exit."""
    loop = asyncio.get_running_loop()
    settled: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: Any, error: BaseException | None) -> None:
        if settled.done():
            return
        if error is not None:
            settled.set_exception(error)
        else:
            settled.set_result(value)

    def run() -> None:
        value: Any = None
        failure: BaseException | None = None
        try:
            value = context.run(call)
        except BaseException as error:  # whatever it raises is the caller's to judge
            failure = error
        # RuntimeError: the loop is closed, so nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, value, failure)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await settled


class FunctionRun:
    """One call of an executor function; ``wait()`` gives its Outcome."""

    def __init__(self, function: ExecutorFunction, context: TurnContext, *, name: str) -> None:
        self._function = function
        self._context = context
        self._name = name
        self._async = is_async(function)
        self._task: asyncio.Task[Outcome] | None = None

    async def start(self) -> None:
        """Start the call; return once its first step is running (R3's start point)."""
        entered = asyncio.Event()

        async def run() -> Outcome:
            entered.set()
            try:
                if self._async:
                    value = await self._function(self._context)
                else:
                    value = await in_thread(self._name, lambda: self._function(self._context))
            except asyncio.CancelledError as error:
                return outcome_of_error(error)
            except Exception as error:
                return outcome_of_error(error)
            return outcome_of_return(value)

        self._task = asyncio.create_task(run(), name=self._name)
        try:
            await entered.wait()
        except asyncio.CancelledError:
            self._task.cancel()
            raise

    def outcome_now(self) -> Outcome | None:
        """The outcome once the call is over, else None."""
        task = self._task
        if task is None or not task.done():
            return None
        if task.cancelled():  # cancelled before its first step ran
            return outcome_of_error(asyncio.CancelledError())
        return task.result()

    async def wait(self) -> Outcome:
        """The outcome once the call is over (a caller's own cancellation is raised)."""
        assert self._task is not None, "start() first"
        await asyncio.wait({self._task})
        outcome = self.outcome_now()
        assert outcome is not None
        return outcome

    def stop(self) -> None:
        """Ask the call to stop (see the module docstring). Idempotent."""
        self._context.cancelled.set()
        if self._async and self._task is not None and not self._task.done():
            self._task.cancel()
