"""Performing one driver step (``coordinator_svc.driver.step``) against the journal.

The step decides; this only does what it yields (a read, a claim, a commit,
holding a turn for the scheduler) and sends the outcome back. What a
commit means for this process's memory (counts, slots, timers, the change
feed) is the engine's ``committed`` callback, run once the write is durable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from coordinator_svc.core.decision import Decision
from coordinator_svc.core.model import OperationRecord
from coordinator_svc.dispatcher.metrics import DispatcherMetrics
from coordinator_svc.dispatcher.ownership import Ownership
from coordinator_svc.dispatcher.spans import commit_span
from coordinator_svc.dispatcher.visibility import note_record
from coordinator_svc.driver.step import (
    Adopted,
    Claim,
    Commit,
    Effect,
    HoldForGrant,
    Load,
    LoadAttempts,
    Refused,
    StepEnd,
    StepMachine,
)
from coordinator_svc.ports import Journal, LeaseLost, StaleVersion

log = logging.getLogger("coordinator_svc.dispatcher")

# A step yields a handful of effects; this bounds a step that never ends.
MAX_EFFECTS = 256


class StepPerformer:
    """``committed(before, stored, decision)``: a commit of this process's own
    landed; ``marked(operation_id)``: a cancel mark for another replica's
    operation landed; ``hold(record)``: hold a QUEUED turn for a grant and say
    why it waits; ``adopted(record)``: count an adopted operation."""

    def __init__(
        self,
        journal: Journal,
        ownership: Ownership | None,
        metrics: DispatcherMetrics,
        *,
        committed: Callable[[OperationRecord, OperationRecord, Decision], None],
        marked: Callable[[str], None],
        hold: Callable[[OperationRecord], str],
        adopted: Callable[[OperationRecord], None],
    ) -> None:
        self._journal = journal
        self._ownership = ownership
        self._metrics = metrics
        self._committed = committed
        self._marked = marked
        self._hold = hold
        self._adopted = adopted

    async def run(self, machine: StepMachine) -> StepEnd:
        """Perform the step's effects in order until it ends."""
        try:
            effect = next(machine)
            for _ in range(MAX_EFFECTS):
                outcome = await self._perform(effect)
                effect = machine.send(outcome)
        except StopIteration as done:
            end: StepEnd = done.value
            return end
        machine.close()
        raise RuntimeError(f"a step yielded more than {MAX_EFFECTS} effects")

    async def _perform(self, effect: Effect) -> object:
        match effect:
            case Load(operation_id=op_id):
                record = await self._journal.get(op_id)
                if record is not None:
                    note_record(record)
                return record
            case LoadAttempts(operation_id=op_id):
                return tuple(await self._journal.attempts(op_id))
            case Claim(record=record):
                return await self._claim(record)
            case Commit():
                return await self._commit(effect)
            case HoldForGrant(record=record):
                return self._hold(record)
            case Adopted(record=record):
                self._adopted(record)
                return None
        raise TypeError(f"not a step effect: {effect!r}")  # pragma: no cover

    async def _claim(self, record: OperationRecord) -> OperationRecord | None:
        assert self._ownership is not None, "only a replica adopts"
        claimed = await self._ownership.claim(record.operation_id)
        if claimed is None:
            return None  # another replica took it first, or is writing it now
        self._ownership.adopted += 1
        log.info(
            "%s: adopted from %s (%s, fencing token %d)",
            record.operation_id,
            record.lease_owner or "no owner",
            claimed.state.value,
            claimed.fencing_token,
        )
        return claimed

    async def _commit(self, effect: Commit) -> OperationRecord | Refused:
        try:
            with commit_span(effect.change):
                stored = await self._journal.commit(effect.change)
        except StaleVersion:
            self._metrics.stale_versions += 1
            return Refused.STALE
        except LeaseLost:
            return Refused.LEASE_LOST
        note_record(stored)
        if effect.mark:
            self._marked(stored.operation_id)  # not ours: no slot, no count
        else:
            self._committed(effect.before, stored, effect.decision)
        return stored
