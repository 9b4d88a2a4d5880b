"""When the dispatcher looks at each operation next, and why (issue 9), pure.

Two things per operation, both decisions rather than shell bookkeeping:

- ``not_before``: a time before which nothing is to be done for it (a
  backoff, a ScheduleAt, a refusal's wait); the shell arms a timer for it and
  its due scan skips the operation until then.
- ``streak``: consecutive fruitless tries (an unanswered call, a step that
  failed), which sets the next backoff (``turnwire.backoff``, the one
  formula); a commit ends it.

The shell performs what this says (timers, ticks); nothing here reads a
clock: ``now`` comes in.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from coordinator_svc.core.model import OperationRecord, OpState
from coordinator_svc.driver.memory import Memory
from turnwire.backoff import backoff_seconds


class Agenda:
    """Both kept in each operation's memory record (``driver.memory``): the
    engine passes its own ``memory``; alone (tests, the simulation) it keeps one."""

    def __init__(
        self, backoff_initial: float, backoff_max: float, memory: Memory | None = None
    ) -> None:
        self._initial = backoff_initial
        self._cap = backoff_max
        self._memory = memory if memory is not None else Memory()

    # --- when ---

    def not_before(self, operation_id: str) -> datetime | None:
        return self._memory.of(operation_id).not_before

    def pending(self) -> list[datetime]:
        """Every time set (a shell that sleeps until the next one reads them)."""
        return [m.not_before for _, m in self._memory.items() if m.not_before is not None]

    def waiting(self, operation_id: str, now: datetime) -> bool:
        """True while a later time is set for it (its timer will tick it)."""
        at = self.not_before(operation_id)
        return at is not None and at > now

    def later(self, operation_id: str, at: datetime) -> None:
        self._memory.update(operation_id, not_before=at)

    def now_due(self, operation_id: str) -> None:
        """Look at it now (woken, granted, or its time came)."""
        self._memory.update(operation_id, not_before=None)

    def scheduled(self, record: OperationRecord, at: datetime) -> bool:
        """A decision's ScheduleAt: record it; True if the shell must arm a timer
        (the journal's next_action_at would bring it back only later, or never
        for a QUEUED turn, which the due scan leaves to the scheduler)."""
        self.later(record.operation_id, at)
        queued = record.state is OpState.QUEUED
        return queued or record.next_action_at is None or at < record.next_action_at

    # --- why: the streak of fruitless tries ---

    def streak(self, operation_id: str) -> int:
        return self._memory.of(operation_id).streak

    def failed(self, operation_id: str) -> int:
        """One more fruitless try; the streak now."""
        return self._memory.update(operation_id, streak=self.streak(operation_id) + 1).streak

    def backoff(self, operation_id: str, now: datetime) -> datetime:
        """A step failed (the journal, a bug): try again after the backoff."""
        streak = self.failed(operation_id)
        at = now + timedelta(seconds=backoff_seconds(streak, initial=self._initial, cap=self._cap))
        self.later(operation_id, at)
        return at

    # --- what a commit changes ---

    def committed(self, after: OperationRecord, now: datetime) -> None:
        """A commit ends the streak; a terminal operation is forgotten; a turn
        sent back to QUEUED with a later next_action_at (a refusal's wait, C6a)
        waits until then."""
        op_id = after.operation_id
        if after.state.terminal:
            self._memory.update(op_id, streak=0, not_before=None)
            return
        retry_at = after.next_action_at if after.state is OpState.QUEUED else None
        if retry_at is not None and retry_at > now:
            self._memory.update(op_id, streak=0, not_before=retry_at)
        else:
            self._memory.update(op_id, streak=0)
