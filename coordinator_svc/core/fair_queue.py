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

Pure: no clock, no I/O; O(log n) per operation (plus a memmove of the
sorted order list, which is C-fast at the sizes a coordinator holds). Removing a turn (cancelled
or timed out while waiting) is lazy: it is skipped when it reaches the front.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from dataclasses import dataclass, field


@dataclass(order=True)
class _Entry:
    start: float
    arrival: int
    operation_id: str = field(compare=False)
    principal: str = field(compare=False)


class FairQueue:
    """Waiting turns of one slot class (pool, kind), fair across principals."""

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._live: dict[str, _Entry] = {}
        self._finish: dict[str, float] = {}
        self._virtual_time = 0.0
        self._arrivals = itertools.count()
        self._per_principal: dict[str, int] = {}
        # Every live entry's (start, arrival), sorted: a turn's place in the
        # queue is a bisection, so the API can show it for a whole page of
        # operations without walking a 10,000-turn backlog for each.
        self._order: list[tuple[float, int]] = []

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
        entry = _Entry(start, next(self._arrivals), operation_id, principal)
        self._live[operation_id] = entry
        self._per_principal[principal] = self._per_principal.get(principal, 0) + 1
        heapq.heappush(self._heap, entry)
        bisect.insort(self._order, (entry.start, entry.arrival))

    def remove(self, operation_id: str) -> bool:
        entry = self._live.pop(operation_id, None)
        if entry is None:
            return False
        self._count_out(entry)
        return True

    def peek(self) -> str | None:
        self._drop_removed()
        return self._heap[0].operation_id if self._heap else None

    def pop(self) -> str | None:
        """The turn to serve next (removed), or None when nothing waits."""
        self._drop_removed()
        if not self._heap:
            return None
        entry = heapq.heappop(self._heap)
        del self._live[entry.operation_id]
        self._count_out(entry)
        self._virtual_time = entry.start
        return entry.operation_id

    def waiting_of(self, principal: str) -> int:
        return self._per_principal.get(principal, 0)

    def principals(self) -> set[str]:
        """The principals with turns waiting here."""
        return set(self._per_principal)

    def ahead_of(self, operation_id: str) -> int | None:
        """How many waiting turns would be served before this one (O(log n))."""
        entry = self._live.get(operation_id)
        if entry is None:
            return None
        return bisect.bisect_left(self._order, (entry.start, entry.arrival))

    def _count_out(self, entry: _Entry) -> None:
        key = (entry.start, entry.arrival)
        del self._order[bisect.bisect_left(self._order, key)]
        left = self._per_principal.get(entry.principal, 0) - 1
        if left > 0:
            self._per_principal[entry.principal] = left
        else:
            self._per_principal.pop(entry.principal, None)

    def _drop_removed(self) -> None:
        heap = self._heap
        while heap and self._live.get(heap[0].operation_id) is not heap[0]:
            heapq.heappop(heap)
