"""What this coordinator process knows about each operation beyond its journal
record: one :class:`OperationMemory` per operation, held in one :class:`Memory`.

Before the driver this was a dozen maps in as many modules (the agenda's
times and streaks, the turn's time limits, which turns a grant is routing,
which a drive is looking at), each to be told of every commit and each to be
emptied when the operation ended. Here it is one record: a commit, a timer,
a grant updates fields of it, and the operation's end drops it whole
(:meth:`Memory.forget`). A record whose fields are all back at their
defaults is dropped too, so memory holds only the operations something is
happening to: a waiting turn that nothing looks after costs nothing.

Nothing here is durable: a restarted process starts empty and C12 recovery
reads what it needs back from the journal.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

# A waiting turn's two time limits (its own deadline, its queue deadline),
# read once from its envelope.
Limits = tuple[datetime | None, datetime | None]


@dataclass(frozen=True, slots=True)
class OperationMemory:
    """One operation as this process knows it now (all fields at their
    defaults: nothing known, the record is not kept).

    - ``not_before``: nothing is to be done for it before then (a backoff, a
      ScheduleAt, a refusal's wait): a timer is armed, the due scan skips it.
    - ``streak``: consecutive fruitless tries, which set the next backoff.
    - ``routing``: a grant of the scheduler is routing it now (its slot is
      reserved; C6: only a grant routes a QUEUED turn).
    - ``driving``: a tick's drive is looking at it now (one at a time).
    - ``tick_owed``: a wake came while it was being driven: it is looked at
      again when that drive ends (a wake is never lost).
    - ``limits``: its time limits, once read (None: not read yet).
    """

    not_before: datetime | None = None
    streak: int = 0
    routing: bool = False
    driving: bool = False
    tick_owed: bool = False
    limits: Limits | None = None


_NOTHING = OperationMemory()


class _Keep(enum.Enum):
    """A field :meth:`Memory.update` leaves as it is."""

    KEEP = enum.auto()


KEEP = _Keep.KEEP


class Memory:
    """Every operation's :class:`OperationMemory`, by operation id."""

    def __init__(self) -> None:
        self._of: dict[str, OperationMemory] = {}

    def of(self, operation_id: str) -> OperationMemory:
        """What is known of it (the empty record if nothing)."""
        return self._of.get(operation_id, _NOTHING)

    def update(
        self,
        operation_id: str,
        *,
        not_before: datetime | _Keep | None = KEEP,
        streak: int | _Keep = KEEP,
        routing: bool | _Keep = KEEP,
        driving: bool | _Keep = KEEP,
        tick_owed: bool | _Keep = KEEP,
        limits: Limits | _Keep | None = KEEP,
    ) -> OperationMemory:
        """Change the fields named (typed: a misspelt field does not pass mypy);
        a record back at every default is dropped."""
        was = self.of(operation_id)
        now = OperationMemory(
            not_before=was.not_before if isinstance(not_before, _Keep) else not_before,
            streak=was.streak if isinstance(streak, _Keep) else streak,
            routing=was.routing if isinstance(routing, _Keep) else routing,
            driving=was.driving if isinstance(driving, _Keep) else driving,
            tick_owed=was.tick_owed if isinstance(tick_owed, _Keep) else tick_owed,
            limits=was.limits if isinstance(limits, _Keep) else limits,
        )
        if now == _NOTHING:
            self._of.pop(operation_id, None)
        else:
            self._of[operation_id] = now
        return now

    def forget(self, operation_id: str) -> None:
        """The operation ended, or is another replica's now: nothing of it is kept."""
        self._of.pop(operation_id, None)

    def items(self) -> Iterator[tuple[str, OperationMemory]]:
        return iter(list(self._of.items()))

    def __contains__(self, operation_id: object) -> bool:
        return operation_id in self._of

    def __len__(self) -> int:
        return len(self._of)
