"""An execution that runs as an asyncio task in the runner's own process.

Used by the built-in, metered and callable executors. `start_in_process`
returns only once the work's first step is running (the R3 start point), and
`wait()` settles only when the task has really finished (R6: the slot is freed
on settlement, never on the cancel itself).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from runner_svc.executors.base import ExecutionOutcome
from runner_svc.executors.outcomes import EXECUTOR_FAILED, cancelled, describe_exception, failed

Work = Callable[[], Awaitable[ExecutionOutcome]]


class InProcessExecution:
    """A handle on an asyncio task that produces an ExecutionOutcome."""

    def __init__(self, task: asyncio.Task[ExecutionOutcome], *, interruptible: bool) -> None:
        self._task = task
        # A sync function in a thread cannot be interrupted: cancelling its
        # task would settle the handle while the thread still runs.
        self._interruptible = interruptible
        self.cancel_requested = False

    async def wait(self) -> ExecutionOutcome:
        # asyncio.wait neither raises the task's exception nor propagates its
        # cancellation, so only a cancellation of this caller is raised here.
        await asyncio.wait({self._task})
        outcome = self.outcome_now()
        assert outcome is not None
        return outcome

    def outcome_now(self) -> ExecutionOutcome | None:
        """The outcome once the task is over (base.SettledAtOnce), else None."""
        if not self._task.done():
            return None
        if self._task.cancelled():
            return cancelled()
        error = self._task.exception()
        if error is not None:
            return failed(EXECUTOR_FAILED, describe_exception(error))
        return self._task.result()

    async def cancel(self, grace_seconds: float) -> None:
        self.cancel_requested = True
        if self._interruptible and not self._task.done():
            self._task.cancel()


async def start_in_process(work: Work, *, name: str, interruptible: bool) -> InProcessExecution:
    """Start `work` as a task; return once its first step has run."""
    entered = asyncio.Event()

    async def run() -> ExecutionOutcome:
        entered.set()
        return await work()

    task = asyncio.create_task(run(), name=name)
    try:
        await entered.wait()
    except asyncio.CancelledError:
        task.cancel()
        raise
    return InProcessExecution(task, interruptible=interruptible)
