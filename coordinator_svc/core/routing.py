"""Choosing a runner (C6: only QUEUED may choose one).

An operation bound by an attempt that may have been delivered is never moved:
the shell calls :func:`route` only for QUEUED operations, and
:func:`runner_for` returns the binding for every other state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.model import OperationRecord, OpState, TurnKind


def serves(runner: RunnerEndpoint, pool: str, kind: TurnKind) -> bool:
    return runner.pool == pool and kind in runner.kinds


def route(
    pool: str,
    kind: TurnKind,
    runners: Sequence[RunnerEndpoint],
    runner_load: Mapping[str, int],
    free_slots: Mapping[str, int | None] | None = None,
) -> RunnerEndpoint | None:
    """The least-loaded runner serving (pool, kind) with a free slot of that kind;
    ties by name. None if none serves, or every one that does is full (issue 9).
    ``free_slots``: free slots per runner, None where its sizes are not known
    yet (then it counts as having room; its refusals are handled by C6a)."""
    free = free_slots or {}
    candidates = [
        r for r in runners if serves(r, pool, kind) and (free.get(r.name) is None or free[r.name])
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda r: (runner_load.get(r.name, 0), r.name))


def runner_for(
    record: OperationRecord,
    runners: Sequence[RunnerEndpoint],
    runner_load: Mapping[str, int],
) -> str | None:
    """Where the operation's next step goes: a fresh choice only while QUEUED."""
    if record.state is OpState.QUEUED:
        chosen = route(record.pool, record.kind, runners, runner_load)
        return chosen.name if chosen is not None else None
    return record.runner
