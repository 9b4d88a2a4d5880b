"""Choosing a runner (C6: only QUEUED may choose one; C6a: one with a free
slot; C6b: one that serves the turn's executor).

An operation bound by an attempt that may have been delivered is never moved:
the shell calls :func:`route` only for QUEUED operations, and
:func:`runner_for` returns the binding for every other state.

Executors (C6b). A runner says which executors it serves in GetRunnerInfo;
the shell passes what it last said per runner (``executors``), None for one
that has not said since this coordinator started. A runner that said serves
exactly those names. One that has not said is taken to serve ``default``
only (a runner's stock configuration, as an unknown runner is taken to have
``UNKNOWN_SIZE_ALLOWANCE`` slots): a turn naming another executor waits for
it to say, and a wrong guess is R14's definite refusal.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.model import OperationRecord, OpState, TurnKind

# The executor of a turn whose Turn.executor is empty, and of a runner's bare
# --executor spec (R14).
from turnwire.vocabulary import DEFAULT_EXECUTOR as DEFAULT_EXECUTOR

# What each runner said it serves; None (or absent): not said yet.
Executors = Mapping[str, Collection[str] | None]


def executor_name(turn_executor: str) -> str:
    """The executor a turn needs: its Turn.executor, empty meaning ``default``."""
    return turn_executor or DEFAULT_EXECUTOR


def serves(runner: RunnerEndpoint, pool: str, kind: TurnKind) -> bool:
    return runner.pool == pool and kind in runner.kinds


def offers(served: Collection[str] | None, executor: str) -> bool:
    """C6b: may a runner that said it serves ``served`` (None: not said yet)
    take a turn for ``executor``? Not said: ``default`` only."""
    if served is None:
        return executor == DEFAULT_EXECUTOR
    return executor in served


def route(
    pool: str,
    kind: TurnKind,
    runners: Sequence[RunnerEndpoint],
    runner_load: Mapping[str, int],
    free_slots: Mapping[str, int | None] | None = None,
    executor: str = DEFAULT_EXECUTOR,
    executors: Executors | None = None,
) -> RunnerEndpoint | None:
    """The least-loaded runner serving (pool, kind) and ``executor`` (C6b) with a
    free slot of that kind; ties by name. None if none serves, or every one that
    does is full (issue 9). ``free_slots``: free slots per runner, None where its
    sizes are not known yet (then it counts as having room; its refusals are
    handled by C6a). ``executors``: what each runner said it serves (C6b)."""
    free = free_slots or {}
    said = executors or {}
    candidates = [
        r
        for r in runners
        if serves(r, pool, kind)
        and offers(said.get(r.name), executor)
        and (free.get(r.name) is None or free[r.name])
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda r: (runner_load.get(r.name, 0), r.name))


def runner_for(
    record: OperationRecord,
    runners: Sequence[RunnerEndpoint],
    runner_load: Mapping[str, int],
    executor: str = DEFAULT_EXECUTOR,
    executors: Executors | None = None,
) -> str | None:
    """Where the operation's next step goes: a fresh choice only while QUEUED."""
    if record.state is OpState.QUEUED:
        chosen = route(
            record.pool, record.kind, runners, runner_load, executor=executor, executors=executors
        )
        return chosen.name if chosen is not None else None
    return record.runner


@dataclass(frozen=True)
class NoRunnerForExecutor:
    """C6b at submit: every runner of the turn's pool and kind has said what it
    serves, and none serves ``executor``; ``served``: the names they serve."""

    executor: str
    served: tuple[str, ...]
    pool: str = "default"
    kind: TurnKind = TurnKind.WRITABLE

    @property
    def message(self) -> str:
        names = ", ".join(self.served) or "none"
        return (
            f"no runner of pool {self.pool} ({self.kind.value} turns) serves executor "
            f"{self.executor!r}; they serve: {names}"
        )


def executor_refusal(
    pool: str,
    kind: TurnKind,
    executor: str,
    runners: Sequence[RunnerEndpoint],
    executors: Executors,
) -> NoRunnerForExecutor | None:
    """C6b: refuse a submit only when it is proven that no runner serving (pool,
    kind) serves ``executor``: every one of them has said what it serves and
    none says it. While one has not said yet (it has not answered GetRunnerInfo
    since this coordinator started) nothing is proven: None, the turn is
    accepted and waits (routing offers it only to a runner that says it). None
    too when no runner serves (pool, kind) at all: NO_RUNNER_FOR_TURN's case."""
    serving = [r for r in runners if serves(r, pool, kind)]
    said = [executors.get(r.name) for r in serving]
    if not serving or any(s is None for s in said):
        return None
    names = sorted({name for s in said if s is not None for name in s})
    if executor in names:
        return None
    return NoRunnerForExecutor(executor, tuple(names), pool, kind)
