"""Every member of the runner set as this coordinator sees it now (AdminService.ListRunners).

Read from what the dispatcher already keeps, nothing asked of the runner: its
identity from the live watch stream (``watching``: unset while the stream is
down), its slot sizes and executors from GetRunnerInfo, the slots in use from the
scheduler's ledger, and whether it answers from the failed-call streak and
the watch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.model import TurnKind
from coordinator_svc.core.scheduler import Scheduler
from coordinator_svc.driver.runners import Runners


@dataclass(frozen=True)
class RunnerState:
    name: str
    address: str
    pool: str
    kinds: frozenset[TurnKind]
    generation: int
    incarnation_id: str
    store_id: str
    writable_slots: int
    read_only_slots: int
    writable_in_use: int
    read_only_in_use: int
    answering: bool
    health: str
    drained: bool
    # What its GetRunnerInfo said it serves (C6b), sorted; empty while not said.
    executors: tuple[str, ...] = ()


def runner_states(
    runners: Sequence[RunnerEndpoint],
    scheduler: Scheduler,
    memory: Runners,
    drained: Collection[str],
) -> list[RunnerState]:
    """``memory``: each runner's record (its identity while its watch is live)."""
    states = []
    for runner in sorted(runners, key=lambda r: r.name):
        known = memory.of(runner.name).identity
        identity = (known.incarnation_id, known.store_id) if known is not None else None
        down = memory.silence(runner.name)
        answering = identity is not None and not down
        if answering:
            health = "answering"
        elif down:
            health = down
        else:
            health = f"runner {runner.name}: no live watch stream yet (identity unknown)"
        states.append(
            RunnerState(
                name=runner.name,
                address=runner.address,
                pool=runner.pool,
                kinds=runner.kinds,
                generation=runner.generation,
                incarnation_id=identity[0] if identity else "",
                store_id=identity[1] if identity else "",
                writable_slots=_size(scheduler, runner, TurnKind.WRITABLE),
                read_only_slots=_size(scheduler, runner, TurnKind.READ_ONLY),
                writable_in_use=scheduler.in_use(runner.name, TurnKind.WRITABLE),
                read_only_in_use=scheduler.in_use(runner.name, TurnKind.READ_ONLY),
                answering=answering,
                health=health,
                drained=runner.name in drained,
                executors=tuple(sorted(scheduler.executors_of(runner.name) or ())),
            )
        )
    return states


def _size(scheduler: Scheduler, runner: RunnerEndpoint, kind: TurnKind) -> int:
    """The runner's slots of ``kind`` as GetRunnerInfo said; 0 while unknown."""
    known = scheduler.known(runner.name) and kind in runner.kinds
    return scheduler.size(runner.name, kind) if known else 0
