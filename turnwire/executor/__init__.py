"""Write an executor: the code a runner calls to execute a turn (docs/EXECUTORS.md).

    from turnwire.executor import Result, RetryableNoEffect, TurnContext

    async def answer(ctx: TurnContext) -> Result:
        prompt = "".join(item.text for item in ctx.items)
        for token in fake_model(prompt):       # your provider's client here
            ctx.emit(token)                    # partial output, streamed as it comes
        return Result("".join(...), metadata={"model": ctx.model.name})

Serve it with ``python -m runner_svc serve --executor llm=python:my_module:answer``
(the module importable by the runner: installed, or on its PYTHONPATH). A
function may be ``async def`` (run on the runner's event loop) or plain (run
on a thread of its own); a class is instantiated once at start and its
``run(ctx)`` method called per turn. ``turnwire.executor.testing.run`` runs one
against a fake turn without a runner.

This package needs nothing beyond the standard library: it imports no gRPC,
no protobuf, no SQLAlchemy and no runner code.
"""

from turnwire.executor.context import (
    FileRef,
    InputItem,
    Limits,
    Model,
    Turn,
    TurnChannel,
    TurnContext,
)
from turnwire.executor.outcomes import (
    MAX_RESULT_BYTES,
    Cancelled,
    FailedAfterEffect,
    Outcome,
    OutputRefused,
    Result,
    RetryableNoEffect,
    TurnFailed,
)

__all__ = [
    "MAX_RESULT_BYTES",
    "Cancelled",
    "FailedAfterEffect",
    "FileRef",
    "InputItem",
    "Limits",
    "Model",
    "Outcome",
    "OutputRefused",
    "Result",
    "RetryableNoEffect",
    "Turn",
    "TurnChannel",
    "TurnContext",
    "TurnFailed",
]
