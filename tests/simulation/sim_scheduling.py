"""The real scheduler (``coordinator_svc.core.scheduler``) inside the simulated
coordinator, and the two rules it must keep, checked from outside (issue 9).

In a *scheduled* schedule (one coordinator; ``Setup.scheduled``) every
QUEUED operation is routed only by the scheduler's grants, exactly as the
engine does: a tick holds the turn, the scheduler grants whatever fits the
free slots (fairest first), and each grant becomes a routed Tick through the
real core. The slot ledger follows the journal as in the engine: bound
states hold a slot, a grant holds it while its preflight is out, and a turn
back in QUEUED with no call in flight, or terminal, frees it.

Rules checked (``SchedulingChecker``):

- capacity: when a Dispatch leaves, the operations bound to that runner and
  kind in the journal (not terminal) are at most the runner's slots of that
  kind. The coordinator can only know what it bound, so this is exactly what
  its scheduler promises (another coordinator's turns are not in a scheduled
  schedule).
- fairness: while a principal has a turn waiting in a slot class, no other
  principal gets more than two grants in that class before it gets one (the
  start-time fair queuing bound for equal weights: a lead of at most one
  turn each way, see core/fair_queue.py). The order is the scheduler's
  memory, never journaled (C6a), so it holds within one coordinator process:
  a restart starts every count again.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.model import OperationRecord, OpState, TurnKind
from coordinator_svc.core.scheduler import Grant, Scheduler

BOUND_STATES = frozenset(
    {OpState.DISPATCHING, OpState.RUNNING, OpState.DISPATCH_UNKNOWN, OpState.CANCELLING}
)
# How many grants one principal may get in a class while another waits there.
FAIR_LEAD = 2

SchedulerFactory = Callable[[list[RunnerEndpoint]], Scheduler]


@dataclass
class SimScheduling:
    """The coordinator process's scheduler; rebuilt from the journal on restart (C12)."""

    sizes: Mapping[str, int]
    factory: SchedulerFactory = Scheduler
    scheduler: Scheduler = field(init=False)

    def __post_init__(self) -> None:
        self.reset(())

    def reset(self, records: Iterable[OperationRecord]) -> None:
        self.scheduler = self.factory([RunnerEndpoint(name, "sim") for name in sorted(self.sizes)])
        for name, slots in self.sizes.items():
            self.scheduler.learned(name, {TurnKind.WRITABLE: slots, TurnKind.READ_ONLY: slots})
        for record in records:
            if record.state in BOUND_STATES and record.runner is not None:
                self.scheduler.bind(record.operation_id, record.runner, record.kind)

    def grants_for(self, record: OperationRecord) -> list[Grant]:
        """Hold the ticked QUEUED turn and grant whatever fits now."""
        self.scheduler.hold(record.operation_id, record.principal, record.pool, record.kind)
        return self.scheduler.grants()

    def waiting_principals(self, pool: str, kind: TurnKind) -> set[str]:
        return self.scheduler.waiting_principals(pool, kind)

    def settle(self, record: OperationRecord, busy: bool) -> None:
        """Keep the ledger in step with the journal after a step: the engine's
        own rule (``Scheduler.follow``); a call in flight is a grant still out."""
        self.scheduler.follow(record, routing=busy)


@dataclass
class SchedulingChecker:
    """The capacity and fairness rules, from the journal and the grants."""

    sizes: Mapping[str, int]
    # (class, waiting principal) -> grants to each other principal since it waited
    _leads: dict[tuple[tuple[str, TurnKind], str], collections.Counter[str]] = field(
        default_factory=dict
    )

    def dispatch_sent(
        self, runner: str, operation_id: str, records: Iterable[OperationRecord]
    ) -> str | None:
        """A violation message, or None."""
        records = list(records)
        kind = next(r.kind for r in records if r.operation_id == operation_id)
        bound = [
            r.operation_id
            for r in records
            if r.runner == runner and r.kind is kind and r.state in BOUND_STATES
        ]
        if len(bound) > self.sizes[runner]:
            return (
                f"Dispatch to {runner} with {len(bound)} {kind.value} turns bound there "
                f"({', '.join(sorted(bound))}) and {self.sizes[runner]} slot(s)"
            )
        return None

    def restarted(self) -> None:
        """The coordinator restarted: its scheduler starts with an empty queue."""
        self._leads.clear()

    def granted(
        self, slot_class: tuple[str, TurnKind], principal: str, waiting: set[str]
    ) -> str | None:
        """A grant to ``principal``; ``waiting``: principals with turns still waiting
        in the class right after it. A violation message, or None."""
        for key in [k for k in self._leads if k[0] == slot_class]:
            if key[1] == principal or key[1] not in waiting:
                del self._leads[key]  # served, or no longer waiting: its count restarts
        for other in waiting - {principal}:
            leads = self._leads.setdefault((slot_class, other), collections.Counter())
            leads[principal] += 1
            if leads[principal] > FAIR_LEAD:
                return (
                    f"{principal} got {leads[principal]} grants in {slot_class[0]}/"
                    f"{slot_class[1].value} while {other} waited"
                )
        return None
