"""The shell around the pure scheduler (issue 9): who waits, who may submit.

Holds the in-memory side of scheduling for one coordinator process:

- ``scheduler`` (``core.scheduler``): the slot ledger and the fair queues of
  QUEUED turns ready to be routed; its grants are performed by the engine.
- ``occupancy`` and ``quotas`` (``core.quotas``): per-principal counts,
  updated at every commit this process makes, and the limits checked at
  submit. With several replicas sharing a PostgreSQL journal, each replica
  counts what it accepted and drove (the limits are per replica).
- a timer per held turn at its first time limit (deadline or queue timeout),
  so a turn waiting in memory is ended on time without any polling.

No journal I/O here: the engine feeds it records it has already read or
written.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.model import OperationRecord, TurnKind
from coordinator_svc.core.quotas import Occupancy, QuotaRefusal, Quotas
from coordinator_svc.core.scheduler import Grant, Scheduler
from coordinator_svc.dispatcher.deadlines import TurnDeadlines
from coordinator_svc.dispatcher.translate import envelope_executor


class WaitingRoom:
    def __init__(
        self,
        runners: Sequence[RunnerEndpoint],
        quotas: Quotas,
        deadlines: TurnDeadlines,
        clock: Callable[[], datetime],
        wake: Callable[[str], None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.quotas = quotas
        self.scheduler = Scheduler(runners, weight_of=quotas.weight_of)
        self.occupancy = Occupancy()
        self._deadlines = deadlines
        self._clock = clock
        self._wake = wake
        self._monotonic = monotonic
        self._timers: dict[str, asyncio.TimerHandle] = {}

    # --- submit-time limits ---

    def quota_check(self, principal: str) -> QuotaRefusal | None:
        return self.quotas.admit(
            principal,
            self._monotonic(),
            queued=self.occupancy.queued[principal],
            in_flight=self.occupancy.in_flight[principal],
        )

    # --- the held turns ---

    def hold(self, record: OperationRecord) -> None:
        """A QUEUED turn ready to be routed waits for a grant (and its time limits)."""
        self.occupancy.note(record.operation_id, record.principal, record.state)
        scheduler = self.scheduler
        if not scheduler.holding(record.operation_id):
            # C6b: it waits with the turns naming the same executor.
            executor = envelope_executor(record.envelope)
            op_id, principal = record.operation_id, record.principal
            scheduler.hold(op_id, principal, record.pool, record.kind, executor)
        first = self._deadlines.first(record)
        if first is not None and record.operation_id not in self._timers:
            delay = max(0.0, (first - self._clock()).total_seconds())
            loop = asyncio.get_running_loop()
            self._timers[record.operation_id] = loop.call_later(
                delay, self._limit_reached, record.operation_id
            )

    def _limit_reached(self, operation_id: str) -> None:
        self._timers.pop(operation_id, None)
        self._wake(operation_id)  # decide_tick ends it if it is still QUEUED

    def grants(self) -> list[Grant]:
        return self.scheduler.grants()

    # --- what the runners say they hold ---

    def reported(
        self, runner: str, sizes: Mapping[TurnKind, int], in_use: Mapping[TurnKind, int]
    ) -> bool:
        """A runner's own pool sizes and slots in use (its watch stream); True if
        that changed what the scheduler knows (the caller then lets waiters try
        again, ``Dispatcher.runner_slots``)."""
        scheduler = self.scheduler
        before = [(scheduler.size(runner, k), scheduler.in_use(runner, k)) for k in TurnKind]
        known = scheduler.known(runner)
        scheduler.learned(runner, sizes)
        scheduler.reported(runner, in_use)
        after = [(scheduler.size(runner, k), scheduler.in_use(runner, k)) for k in TurnKind]
        return not known or before != after

    def committed(self, after: OperationRecord) -> None:
        """Keep the counts in step with a commit this process made (the queue and
        the slot ledger follow it in the driver: ``Driver.committed``)."""
        self.occupancy.note(after.operation_id, after.principal, after.state)
        if after.state.terminal:
            timer = self._timers.pop(after.operation_id, None)
            if timer is not None:
                timer.cancel()

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
