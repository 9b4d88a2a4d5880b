"""Fair order across principals for turns waiting for a slot (issue 9).

Start-time fair queuing (Goyal, Vin and Cheng, 1996) with unit cost: every
turn a principal enqueues gets a start tag ``max(V, F)`` and a finish tag
``start + 1 / weight``, where ``F`` is the finish tag of that principal's
previous turn and ``V`` the start tag of the turn served last. The queue
serves the smallest start tag first (ties in arrival order).

Why this scheme:

- A principal that floods gets tags far in the future, so a principal that
  arrives later is served within one round: with ``n`` backlogged principals
  of equal weight a newcomer waits for at most ``n - 1`` dispatches ahead of
  it, however many turns the flood queued. That is the bound the scheduler
  benchmark measures (bench/scheduler.py).
- Weights give shares: weight 2 gets twice the dispatches of weight 1 while
  both are backlogged.
- An idle principal banks no credit: its next start tag is at least ``V``,
  so quiet hours cannot be saved up for a burst that starves the rest.
- Cost is one dispatch, not slot-seconds: the coordinator cannot know how
  long a turn will run. The per-principal in-flight quota bounds how many
  slots one principal's long turns can hold at once.
- A turn that leaves without being served (cancelled, timed out while
  waiting) costs its principal nothing. Tags belong to a principal's *places*
  in line, not to its turns: its waiting turns hold its places in arrival
  order, and a turn leaving gives up the principal's last place (its
  ``F`` goes back to that place's start), so every later turn moves up one.
  The queue is then the one it would be had the turn never been queued
  (found by the simulation, seed 4468: a principal whose queued turns were
  cancelled was charged for them, and another principal got three grants
  while it waited).

Pure: no clock, no I/O. Each operation is a bisection plus a memmove of a
sorted list (C-fast at the sizes a coordinator holds), so a turn's place in
line (``ahead_of``) costs O(log n) without walking a 10,000-turn backlog.
"""

from __future__ import annotations

import bisect
import itertools

# A place in line: (start tag, arrival number of the push that made it).
_Place = tuple[float, int]


class _Line:
    """One principal's waiting turns (arrival order) and places (tag order)."""

    __slots__ = ("places", "turns")

    def __init__(self) -> None:
        self.turns: list[tuple[int, str]] = []  # (arrival, operation_id), ascending
        self.places: list[_Place] = []  # ascending; turns[i] holds places[i]


class FairQueue:
    """Waiting turns of one slot class (pool, kind), fair across principals."""

    def __init__(self) -> None:
        self._lines: dict[str, _Line] = {}
        # operation_id -> (principal, arrival)
        self._live: dict[str, tuple[str, int]] = {}
        self._finish: dict[str, float] = {}
        self._virtual_time = 0.0
        self._arrivals = itertools.count()
        # Every place held, with its principal, sorted: the smallest is served
        # next, and a turn's place in the queue is one bisection.
        self._order: list[tuple[float, int, str]] = []

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, operation_id: object) -> bool:
        return operation_id in self._live

    def push(self, operation_id: str, principal: str, weight: float = 1.0) -> None:
        """Enqueue (no-op if already waiting: it keeps its place)."""
        if operation_id in self._live:
            return
        if weight <= 0:
            raise ValueError(f"weight must be positive, got {weight}")
        start = max(self._virtual_time, self._finish.get(principal, 0.0))
        self._finish[principal] = start + 1.0 / weight
        arrival = next(self._arrivals)
        line = self._lines.setdefault(principal, _Line())
        line.turns.append((arrival, operation_id))
        line.places.append((start, arrival))
        self._live[operation_id] = (principal, arrival)
        bisect.insort(self._order, (start, arrival, principal))

    def remove(self, operation_id: str) -> bool:
        """The turn leaves unserved: its principal gives up its last place."""
        found = self._live.pop(operation_id, None)
        if found is None:
            return False
        principal, arrival = found
        line = self._lines[principal]
        del line.turns[bisect.bisect_left(line.turns, (arrival, ""))]
        start, made = line.places.pop()
        self._finish[principal] = start
        self._forget(line, principal, (start, made))
        return True

    def peek(self) -> str | None:
        if not self._order:
            return None
        return self._lines[self._order[0][2]].turns[0][1]

    def pop(self) -> str | None:
        """The turn to serve next (removed), or None when nothing waits."""
        if not self._order:
            return None
        start, made, principal = self._order[0]
        line = self._lines[principal]
        _, operation_id = line.turns.pop(0)
        line.places.pop(0)
        del self._live[operation_id]
        self._forget(line, principal, (start, made))
        self._virtual_time = start
        return operation_id

    def waiting_of(self, principal: str) -> int:
        line = self._lines.get(principal)
        return len(line.turns) if line is not None else 0

    def principals(self) -> set[str]:
        """The principals with turns waiting here."""
        return set(self._lines)

    def ahead_of(self, operation_id: str) -> int | None:
        """How many waiting turns would be served before this one (O(log n))."""
        found = self._live.get(operation_id)
        if found is None:
            return None
        principal, arrival = found
        line = self._lines[principal]
        start, made = line.places[bisect.bisect_left(line.turns, (arrival, ""))]
        return bisect.bisect_left(self._order, (start, made, principal))

    def _forget(self, line: _Line, principal: str, place: _Place) -> None:
        del self._order[bisect.bisect_left(self._order, (*place, principal))]
        if not line.turns:
            del self._lines[principal]
