"""Executor functions written against turnwire.executor, as a user writes them.

Used through turnwire.executor.testing (tests/executor) and through a real
runner as ``python:tests.executor.functions:<name>`` (tests/runner/contract).
Their knobs come from the turn's parameters.
"""

from __future__ import annotations

import asyncio
import time

from turnwire.executor import (
    FailedAfterEffect,
    OutputRefused,
    Result,
    RetryableNoEffect,
    TurnContext,
    TurnFailed,
)


async def stream_words(ctx: TurnContext) -> Result:
    """Emits each word of the input as a chunk (``pause_ms`` apart), returns them all."""
    text = " ".join(item.text for item in ctx.items)
    pause = int(ctx.parameters.get("pause_ms", "0")) / 1000
    words = text.split() * int(ctx.parameters.get("repeat", "1"))
    for word in words:
        ctx.emit(word + " ")
        await asyncio.sleep(pause)
    return Result(" ".join(words), metadata={"words": str(len(words)), "model": ctx.model.name})


def stream_words_blocking(ctx: TurnContext) -> str:
    """stream_words as a plain function (it runs on a thread)."""
    words = " ".join(item.text for item in ctx.items).split()
    for word in words:
        ctx.emit(word.encode(), content_type="application/x-word")
    return " ".join(words)


def describe(ctx: TurnContext) -> Result:
    """What the context says, as the result (plain function)."""
    remaining = ctx.remaining()
    lines = [
        f"operation_id={ctx.operation_id}",
        f"attempt={ctx.attempt}",
        f"executor={ctx.turn.executor}",
        f"model={ctx.model.provider}/{ctx.model.name}",
        f"parameters={dict(sorted(ctx.parameters.items()))}",
        f"items={[(i.role, i.text) for i in ctx.items]}",
        f"principal={ctx.principal}",
        f"has_deadline={ctx.deadline is not None}",
        f"remaining_known={remaining is not None}",
        f"heartbeat_timeout={ctx.limits.heartbeat_timeout}",
    ]
    ctx.log.info("described the turn")
    return Result("\n".join(lines), content_type="text/plain")


def wait_for_cancel(ctx: TurnContext) -> str:
    """A plain function that heartbeats until the runner asks it to stop."""
    deadline = time.monotonic() + float(ctx.parameters.get("seconds", "20"))
    while time.monotonic() < deadline:
        ctx.heartbeat()
        ctx.check_cancelled()
        ctx.cancelled.wait(0.02)
    return "never cancelled"


async def sleep_async(ctx: TurnContext) -> str:
    """An async function that emits once, then sleeps (cancellable at its await)."""
    ctx.emit("started")
    await asyncio.sleep(float(ctx.parameters.get("seconds", "20")))
    return "slept"


def go_silent(ctx: TurnContext) -> str:
    """Heartbeats ``beats`` times, then stops heartbeating until cancelled."""
    for _ in range(int(ctx.parameters.get("beats", "2"))):
        ctx.heartbeat()
        time.sleep(0.02)
    if ctx.cancelled.wait(float(ctx.parameters.get("seconds", "20"))):
        ctx.check_cancelled()
    return "was never stopped"


def fail_as_asked(ctx: TurnContext) -> str:
    """Raises the error ``how`` names: plain, no_effect, after_effect, value."""
    how = ctx.parameters.get("how", "plain")
    if how == "no_effect":
        raise RetryableNoEffect("provider said 429 before accepting", retry_after=1.5)
    if how == "after_effect":
        raise FailedAfterEffect("tokens were billed, then the connection broke")
    if how == "value":
        raise ValueError("a bug")
    raise TurnFailed("the provider refused the prompt")


def emit_past_limits(ctx: TurnContext) -> Result:
    """Emits a chunk over the limit, then small chunks until the budget refuses one."""
    refusals = []
    try:
        ctx.emit(b"x" * (int(ctx.parameters.get("big", "70000"))))
    except OutputRefused as refused:
        refusals.append(refused.reason)
    sent = 0
    for _ in range(int(ctx.parameters.get("tries", "100"))):
        try:
            ctx.emit(b"y" * 1000)
            sent += 1
        except OutputRefused as refused:
            refusals.append(refused.reason)
            break
    return Result(f"sent={sent}", metadata={"refusals": ",".join(refusals)})


def returns_nonsense(ctx: TurnContext) -> object:
    return 42


class Counter:
    """A class target: made once when the runner starts, its run() called per turn."""

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, ctx: TurnContext) -> str:
        self.calls += 1
        return f"call {self.calls} for {ctx.operation_id}"


async def stream_blocks(ctx: TurnContext) -> str:
    """Emits ``count`` chunks of ``size`` bytes, as fast as it can."""
    count, size = int(ctx.parameters.get("count", "10")), int(ctx.parameters.get("size", "1000"))
    for n in range(count):
        ctx.emit(bytes([65 + n % 26]) * size)
        if n % 16 == 0:
            await asyncio.sleep(0)
    return f"{count} blocks"
