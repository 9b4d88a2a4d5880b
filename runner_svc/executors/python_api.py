"""The Python executor: a function written against turnwire.executor (docs/EXECUTORS.md).

``python:<module>:<name>`` imports ``module`` when the runner starts (a missing
module or name is a ValueError then, not a failure at the first turn) and
takes ``name``:

- a function, ``async def`` or plain, called once per execution with a
  :class:`turnwire.executor.TurnContext`;
- a class: instantiated once, with no arguments, when the runner starts (so
  it can hold a provider client or a connection pool); its ``run(ctx)`` method
  is called per execution.

How it is called, stopped and settled is turnwire.executor.running's (the same
code turnwire.executor.testing runs): async functions as a task on the
runner's loop, plain ones on a thread of their own; a stop sets
``ctx.cancelled`` and cancels an async function's task. The return value or
exception becomes the outcome as turnwire.executor.outcomes says, declared
effect included (R7).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from runner_svc.executors.base import ExecutionOutcome, ExecutionRequest
from runner_svc.executors.python_callable import import_function
from turnwire.common.v1 import turn_pb2
from turnwire.executor import context as api
from turnwire.executor.outcomes import Outcome
from turnwire.executor.running import ExecutorFunction, FunctionRun
from turnwire.runner.v1 import runner_pb2


def load_python_target(target: str) -> ExecutorFunction:
    """``module:name`` -> what to call per execution; ValueError says why not."""
    found: object = import_function(target)
    if not inspect.isclass(found):
        assert callable(found)  # import_function refuses anything else
        return found
    try:
        instance = found()
    except Exception as error:
        raise ValueError(f"{target!r}: cannot instantiate {found.__name__}(): {error}") from error
    run = getattr(instance, "run", None)
    if not callable(run):
        raise ValueError(f"{target!r} is a class without a run(ctx) method")
    return run  # type: ignore[no-any-return]


def _duration(message: object, present: bool) -> timedelta | None:
    if not present:
        return None
    seconds = getattr(message, "seconds", 0) + getattr(message, "nanos", 0) / 1e9
    return timedelta(seconds=seconds) if seconds > 0 else None


def _limits(limits: turn_pb2.Limits) -> api.Limits:
    deadline = None
    if limits.HasField("deadline"):
        deadline = datetime.fromtimestamp(
            limits.deadline.seconds + limits.deadline.nanos / 1e9, UTC
        )
    budget = timedelta(milliseconds=limits.budget_ms) if limits.budget_ms else None
    heartbeat = _duration(limits.heartbeat_timeout, limits.HasField("heartbeat_timeout"))
    return api.Limits(deadline, budget, heartbeat)


def _strings(values: Mapping[str, str]) -> dict[str, str]:
    return dict(values)


def turn_of(request: ExecutionRequest) -> api.Turn:
    """The envelope as the API shows it: decoded, no protobuf."""
    envelope: runner_pb2.TurnEnvelope = request.envelope
    return api.Turn(
        operation_id=request.operation_id,
        attempt=request.execution,  # R15: the execution's number
        executor=request.executor,
        items=tuple(
            api.InputItem(
                item.item_id, item.role, item.content_type, item.content, _strings(item.metadata)
            )
            for item in envelope.input_items
        ),
        model=api.Model(
            envelope.model.provider, envelope.model.name, _strings(envelope.model.parameters)
        ),
        files=tuple(
            api.FileRef(f.uri, f.sha256, f.size_bytes, f.media_type) for f in envelope.files
        ),
        item_metadata=_strings(envelope.item_metadata),
        principal=envelope.principal,
        limits=_limits(envelope.limits),
        incarnation_id=request.incarnation_id,
    )


def execution_outcome(outcome: Outcome) -> ExecutionOutcome:
    return ExecutionOutcome(
        succeeded=outcome.succeeded,
        output=outcome.output,
        content_type=outcome.content_type,
        error_reason=str(outcome.reason),
        error_message=outcome.message,
        metadata=dict(outcome.metadata),
        effect=outcome.effect.value if outcome.effect is not None else "",
        retry_after=outcome.retry_after,
    )


class PythonExecution:
    """A handle on one call (base.ExecutionHandle, base.SettledAtOnce)."""

    def __init__(self, run: FunctionRun) -> None:
        self._run = run

    async def wait(self) -> ExecutionOutcome:
        return execution_outcome(await self._run.wait())

    def outcome_now(self) -> ExecutionOutcome | None:
        outcome = self._run.outcome_now()
        return None if outcome is None else execution_outcome(outcome)

    async def cancel(self, grace_seconds: float) -> None:
        del grace_seconds  # a task is cancelled at once; a thread cannot be killed
        self._run.stop()


class PythonExecutor:
    """Calls one turnwire.executor function (or class's run) per execution."""

    name = "python"

    def __init__(self, function: ExecutorFunction, *, target: str = "") -> None:
        self.function = function
        self.target = target or getattr(function, "__qualname__", repr(function))

    async def start(self, request: ExecutionRequest) -> PythonExecution:
        context = api.TurnContext(turn_of(request), request.channel)
        run = FunctionRun(
            self.function, context, name=f"python:{self.target}:{request.operation_id}"
        )
        await run.start()
        return PythonExecution(run)
