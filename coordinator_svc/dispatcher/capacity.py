"""What the coordinator knows of its runners' slots (issue 9: wait for capacity).

Each runner reports the size of its slot pools (GetRunnerInfo, read whenever
its watch stream opens); the coordinator counts the operations it has bound to
each runner, per kind. Routing then picks only a runner with a free slot of the
turn's kind, so a busy runner is waited for instead of being sent Dispatches it
must refuse. Until a runner's sizes are known it is treated as having room (the
old behaviour: its NO_FREE_SLOT refusals are handled by C6a). A turn that finds
every serving runner full waits; each slot that frees wakes the longest-waiting
turn first.

The count is the coordinator's view (bound, not yet terminal in the journal),
so it can only overstate use (a settled row still counted until its terminal
commit): the cost is a moment of idle slot, never an oversubscribed runner.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping

from coordinator_svc.core.model import TurnKind


class Capacity:
    def __init__(self) -> None:
        self._sizes: dict[str, dict[TurnKind, int]] = {}
        self._bound: dict[str, tuple[str, TurnKind]] = {}
        self._in_use: collections.Counter[tuple[str, TurnKind]] = collections.Counter()
        # Operations waiting for a slot, oldest first (a dict keeps insertion order).
        self._waiting: dict[str, None] = {}

    def learned(self, runner: str, sizes: Mapping[TurnKind, int]) -> None:
        """The runner's pool sizes (GetRunnerInfo)."""
        self._sizes[runner] = dict(sizes)

    def bind(self, operation_id: str, runner: str, kind: TurnKind) -> None:
        self.unbind(operation_id)
        self._bound[operation_id] = (runner, kind)
        self._in_use[(runner, kind)] += 1
        self._waiting.pop(operation_id, None)

    def unbind(self, operation_id: str) -> bool:
        """Forget the operation's binding; True if that freed a counted slot."""
        bound = self._bound.pop(operation_id, None)
        if bound is None:
            return False
        self._in_use[bound] -= 1
        if self._in_use[bound] <= 0:
            del self._in_use[bound]
        return True

    def load(self) -> collections.Counter[str]:
        """Bound operations per runner (the router's tie-breaker)."""
        load: collections.Counter[str] = collections.Counter()
        for (runner, _), count in self._in_use.items():
            load[runner] += count
        return load

    def free(self, runner: str, kind: TurnKind) -> int | None:
        """Free slots of ``kind`` on ``runner``; None while its sizes are unknown."""
        sizes = self._sizes.get(runner)
        if sizes is None:
            return None
        return max(0, sizes.get(kind, 0) - self._in_use[(runner, kind)])

    def frees(self, kind: TurnKind, runners: list[str]) -> dict[str, int | None]:
        return {runner: self.free(runner, kind) for runner in runners}

    def wait(self, operation_id: str) -> None:
        self._waiting.setdefault(operation_id, None)

    def waiting(self) -> int:
        return len(self._waiting)

    def next_waiting(self) -> str | None:
        """The longest-waiting operation (removed: it is about to be woken)."""
        for operation_id in self._waiting:
            del self._waiting[operation_id]
            return operation_id
        return None
