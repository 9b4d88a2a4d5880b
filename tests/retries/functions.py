"""Executor functions for R15's end-to-end tests, run by a real runner as
``python:tests.retries.functions:scripted``.

Each execution appends ``<operation_id> <attempt>`` to the file named by the
``log`` parameter (so a test sees every execution the runner started, and
that the operation id was the same each time), then behaves as ``mode`` says.
"""

from __future__ import annotations

from pathlib import Path

from turnwire.executor import FailedAfterEffect, RetryableNoEffect, TurnContext


def scripted(ctx: TurnContext) -> str:
    """``mode``: ``flaky`` (effect NONE on the first ``fail_times`` executions,
    then succeeds), ``none`` (always effect NONE), ``applied`` (FailedAfterEffect),
    ``undeclared`` (a plain exception: nothing declared)."""
    log = ctx.parameters.get("log")
    if log:
        with Path(log).open("a", encoding="utf-8") as out:
            out.write(f"{ctx.operation_id} {ctx.attempt}\n")
    mode = ctx.parameters.get("mode", "flaky")
    if mode == "applied":
        raise FailedAfterEffect("the provider billed, then the connection dropped")
    if mode == "undeclared":
        raise RuntimeError("something broke")
    if mode == "none" or ctx.attempt <= int(ctx.parameters.get("fail_times", "1")):
        raise RetryableNoEffect("429 Too Many Requests")
    return f"done on execution {ctx.attempt}"
