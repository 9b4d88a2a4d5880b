"""Run an executor function against a fake turn, without a runner (docs/EXECUTORS.md).

    from turnwire.executor.testing import run

    report = run(my_executor, items=["hello"], parameters={"temperature": "0"})
    assert report.outcome.succeeded
    assert report.streamed_text == "Hel" "lo"   # what emit() sent, in order
    assert report.heartbeats >= 1

The function is called exactly as a runner calls it (turnwire.executor.running:
an ``async def`` as a task, a plain function on a thread) with a
:class:`~turnwire.executor.TurnContext` built from the arguments, and the
runner's default output limits (turnwire.output_stream.StreamLimits): an
oversized chunk, or one past the stream budget, is refused to the function
exactly as a runner refuses it. The stops a runner makes are played too:
``cancel_after`` (a cancel), ``heartbeat_timeout`` (stopped after that long
without a heartbeat or chunk) and ``budget`` (stopped after that long); the
report says which one stopped it (``stopped_by``). Nothing is stored and
nothing leaves the process.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ParamSpec

from turnwire.executor.context import (
    FileRef,
    InputItem,
    Limits,
    Model,
    Turn,
    TurnContext,
)
from turnwire.executor.outcomes import TEXT_PLAIN, Outcome, OutputRefused
from turnwire.executor.running import ExecutorFunction, FunctionRun
from turnwire.observability.logs import turn_context
from turnwire.output_stream import Chunk, OutputStream, Refusal, StreamLimits

ItemLike = InputItem | str | bytes
P = ParamSpec("P")
# How often the fake runner checks its limits while the function runs.
_TICK_SECONDS = 0.01


@dataclass
class RunReport:
    """What one run of the function did."""

    outcome: Outcome
    chunks: list[Chunk] = field(default_factory=list)  # every chunk emitted, in order
    refused: list[OutputRefused] = field(default_factory=list)  # emits refused
    heartbeats: int = 0
    # Why the fake runner stopped it: "CANCEL", "BUDGET", "HEARTBEAT"; None if it
    # was not stopped. (Like a runner's stop reason, R6: the first one.)
    stopped_by: str | None = None

    @property
    def streamed(self) -> bytes:
        return b"".join(chunk.data for chunk in self.chunks)

    @property
    def streamed_text(self) -> str:
        return self.streamed.decode()


class _Channel:
    """The fake runner's side of the context: the runner's limits, a record of it all."""

    def __init__(self, limits: StreamLimits) -> None:
        self._limits = limits
        self._stream = OutputStream()
        self._lock = threading.Lock()
        self.chunks: list[Chunk] = []
        self.refused: list[OutputRefused] = []
        self.heartbeats = 0
        self.last_sign_of_life = time.monotonic()

    def emit(self, data: bytes, content_type: str) -> int:
        with self._lock:
            added = self._stream.append(data, content_type, time.time(), self._limits)
            if isinstance(added, Refusal):
                refused = OutputRefused(added.reason, added.message)
                self.refused.append(refused)
                raise refused
            self.chunks.append(added)
            self.last_sign_of_life = time.monotonic()
            return added.offset

    def heartbeat(self) -> None:
        with self._lock:
            self.heartbeats += 1
            self.last_sign_of_life = time.monotonic()

    def close(self) -> None:
        with self._lock:
            self._stream.close()


def _item(value: ItemLike, number: int) -> InputItem:
    if isinstance(value, InputItem):
        return value
    content = value.encode() if isinstance(value, str) else bytes(value)
    content_type = TEXT_PLAIN if isinstance(value, str) else "application/octet-stream"
    return InputItem(f"item-{number}", "user", content_type, content)


def _seconds(value: float | timedelta | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=value)


async def run_async(
    function: ExecutorFunction,
    *,
    items: Iterable[ItemLike] = (),
    parameters: Mapping[str, str] | None = None,
    model: str = "test-model",
    provider: str = "test",
    files: Iterable[FileRef] = (),
    operation_id: str = "op-test",
    attempt: int = 1,
    executor: str = "default",
    principal: str = "tester",
    deadline: datetime | None = None,
    budget: float | timedelta | None = None,
    heartbeat_timeout: float | timedelta | None = None,
    cancel_after: float | None = None,
    limits: StreamLimits | None = None,
    give_up_after: float = 30.0,
) -> RunReport:
    """Run ``function`` once against a fake turn; see the module docstring.

    ``give_up_after``: the test's own bound (seconds); a function still running then is
    stopped and, if it will not stop, TimeoutError is raised."""
    turn = Turn(
        operation_id,
        attempt,
        executor=executor,
        items=tuple(_item(item, n) for n, item in enumerate(items)),
        model=Model(provider, model, dict(parameters or {})),
        files=tuple(files),
        principal=principal,
        limits=Limits(deadline, _seconds(budget), _seconds(heartbeat_timeout)),
    )
    channel = _Channel(limits or StreamLimits())
    context = TurnContext(turn, channel)
    call = FunctionRun(function, context, name=f"executor-test:{operation_id}")
    with turn_context(operation_id, attempt=attempt, principal=principal):
        await call.start()
        stopped_by = await _watch(call, channel, turn.limits, cancel_after, give_up_after)
        outcome = await asyncio.wait_for(call.wait(), give_up_after)
    channel.close()
    return RunReport(outcome, channel.chunks, channel.refused, channel.heartbeats, stopped_by)


async def _watch(
    call: FunctionRun,
    channel: _Channel,
    limits: Limits,
    cancel_after: float | None,
    give_up_after: float,
) -> str | None:
    """Play the runner's stops until the call is over; the first stop's reason."""
    started = time.monotonic()
    budget = limits.budget.total_seconds() if limits.budget is not None else None
    beat = limits.heartbeat_timeout.total_seconds() if limits.heartbeat_timeout else None
    stopped_by: str | None = None
    while call.outcome_now() is None:
        now = time.monotonic()
        if now - started > give_up_after:
            call.stop()
            return stopped_by or "TIMEOUT"
        reason = None
        if limits.deadline is not None and time.time() >= limits.deadline.timestamp():
            reason = "DEADLINE"
        elif budget is not None and now - started >= budget:
            reason = "BUDGET"
        elif beat is not None and now - channel.last_sign_of_life >= beat:
            reason = "HEARTBEAT"
        elif cancel_after is not None and now - started >= cancel_after:
            reason = "CANCEL"
        if reason is not None:
            stopped_by = stopped_by or reason
            call.stop()
        await asyncio.sleep(_TICK_SECONDS)
    return stopped_by


def _blocking(
    coroutine_function: Callable[P, Coroutine[Any, Any, RunReport]],
) -> Callable[P, RunReport]:
    def blocking(*args: P.args, **kwargs: P.kwargs) -> RunReport:
        return asyncio.run(coroutine_function(*args, **kwargs))

    blocking.__doc__ = "``run_async`` on a fresh event loop (for plain test functions)."
    return blocking


run = _blocking(run_async)
