"""Schedulers with one rule broken, to show the simulation's issue 9 checks have teeth.

Each is the real ``core.scheduler.Scheduler`` with exactly one rule removed:

- ``ignores_slots``: the capacity rule: every runner always has all its slots
  free, so turns are routed to runners already full (as far as the coordinator
  knows);
- ``first_come_first_served``: the fairness rule: waiting turns are served in
  arrival order, so a principal that queued a flood first is served first.
"""

from __future__ import annotations

import itertools

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.fair_queue import FairQueue
from coordinator_svc.core.model import TurnKind
from coordinator_svc.core.routing import DEFAULT_EXECUTOR
from coordinator_svc.core.scheduler import Scheduler


class _IgnoresSlots(Scheduler):
    def free(self, runner: str, kind: TurnKind) -> int:
        return self.size(runner, kind)  # BROKEN: what is in use is not subtracted


class _ArrivalOrder(FairQueue):
    """Every turn gets the next tag in arrival order: FIFO, whoever asks."""

    _next = itertools.count()

    def push(self, operation_id: str, principal: str, weight: float = 1.0) -> None:
        self._virtual_time = float(next(self._next))  # BROKEN: tags follow arrival only
        self._finish.pop(principal, None)
        super().push(operation_id, principal, weight)


class _FirstComeFirstServed(Scheduler):
    def hold(
        self,
        operation_id: str,
        principal: str,
        pool: str,
        kind: TurnKind,
        executor: str = DEFAULT_EXECUTOR,
    ) -> None:
        # One queue per slot class (pool, kind, executor: C6b), as the real one.
        self._queues.setdefault((pool, kind, executor), _ArrivalOrder())
        super().hold(operation_id, principal, pool, kind, executor)


def ignores_slots(runners: list[RunnerEndpoint]) -> Scheduler:
    return _IgnoresSlots(runners)


def first_come_first_served(runners: list[RunnerEndpoint]) -> Scheduler:
    return _FirstComeFirstServed(runners)
