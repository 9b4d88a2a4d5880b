"""What this coordinator knows of each runner: one :class:`RunnerMemory` per
member, held in one :class:`Runners` (issue 26: before the driver it lived in
the runner calls' failure counter and in each watch stream's fields).

- ``identity``: who the runner is while a live watch stream follows it
  (GetRunnerInfo read, the incarnation checked); a never-sent first attempt
  may bind to it without a preflight (C2a). Unset the moment the stream
  fails, ends or names another incarnation.
- ``trouble``: consecutive unanswered calls. A runner whose calls go
  unanswered ``UNREACHABLE_AFTER`` times in a row gets no grant and no first
  attempt until it answers again (one lost call is not an outage); any
  answer, a watch message too, ends the streak.
- ``down_since`` and ``last_error``: since when its watch has not answered,
  and why (shown on every operation that waits for it, PROTOCOL §8.2).

The shell tells it what it saw, with the time; nothing here reads a clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from coordinator_svc.core.events import RunnerIdentity

UNREACHABLE_AFTER = 3


@dataclass(frozen=True, slots=True)
class RunnerMemory:
    identity: RunnerIdentity | None = None
    trouble: int = 0
    down_since: datetime | None = None
    last_error: str = ""


_NOTHING = RunnerMemory()


class Runners:
    """Every member's :class:`RunnerMemory`, by runner name."""

    def __init__(self) -> None:
        self._of: dict[str, RunnerMemory] = {}

    def of(self, runner: str) -> RunnerMemory:
        return self._of.get(runner, _NOTHING)

    def _set(self, runner: str, memory: RunnerMemory) -> None:
        if memory == _NOTHING:
            self._of.pop(runner, None)
        else:
            self._of[runner] = memory

    def forget(self, runner: str) -> None:
        """It left the runner set: nothing of it is kept."""
        self._of.pop(runner, None)

    # --- calls ---

    def answered(self, runner: str) -> bool:
        """A call or a watch message got through: the streak ends. True if routing
        had left it out (waiting turns may go to it now)."""
        was = self.of(runner)
        self._set(runner, dataclasses.replace(was, trouble=0))
        return was.trouble >= UNREACHABLE_AFTER

    def unanswered(self, runner: str) -> None:
        was = self.of(runner)
        self._set(runner, dataclasses.replace(was, trouble=was.trouble + 1))

    def unreachable(self) -> frozenset[str]:
        """Runners routing avoids now."""
        return frozenset(name for name, m in self._of.items() if m.trouble >= UNREACHABLE_AFTER)

    def trouble(self) -> Mapping[str, int]:
        return {name: m.trouble for name, m in self._of.items() if m.trouble}

    # --- the watch stream ---

    def identified(self, runner: str, identity: RunnerIdentity | None) -> None:
        """Its live watch knows who it is now (None: the stream is not live)."""
        self._set(runner, dataclasses.replace(self.of(runner), identity=identity))

    def down(self, runner: str, error: str, now: datetime) -> None:
        """Its watch failed; the first failure of a streak sets since when."""
        was = self.of(runner)
        since = was.down_since if was.down_since is not None else now
        self._set(runner, dataclasses.replace(was, down_since=since, last_error=error))

    def up(self, runner: str) -> None:
        self._set(runner, dataclasses.replace(self.of(runner), down_since=None, last_error=""))

    def silence(self, runner: str) -> str:
        """ "" while the runner answers; else what is known of its silence."""
        known = self.of(runner)
        if not known.trouble and known.down_since is None:
            return ""
        said = f"runner {runner} is not answering"
        if known.down_since is not None:
            said += f" since {known.down_since.isoformat()} ({known.last_error})"
        if known.trouble:
            said += f"; {known.trouble} call(s) in a row unanswered"
        return said
