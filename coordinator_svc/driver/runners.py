"""What this coordinator knows of each runner: one :class:`RunnerMemory` per
member, held in one :class:`Runners` (issue 26: before the driver it lived in
the runner calls' failure counter and in each watch stream's fields).

- ``identity``: who the runner is while a live watch stream follows it
  (GetRunnerInfo read, the incarnation checked). Unset the moment the stream
  fails, ends or names another incarnation.
- ``heard_at``: when the runner last showed it was up while that watch knew
  it: the watch delivered something (GetRunnerInfo's answer, a row, a
  heartbeat) or a call was answered. A never-sent first attempt binds to the
  identity without a preflight (C2a) only while the runner is *known live*:
  heard from within ``live_within``. A stream notices a dead runner only when
  it breaks, and a Dispatch sent meanwhile fails with no proof of anything
  (C7): the turn would end UNKNOWN although nothing ran. A preflight in that
  window fails instead, before any Dispatch, and the turn waits QUEUED.
- ``trouble``: consecutive unanswered calls. A runner whose calls go
  unanswered ``UNREACHABLE_AFTER`` times in a row gets no grant and no first
  attempt until it answers again (one lost call is not an outage); any
  answer, a watch message too, ends the streak.
- ``down_since`` and ``last_error``: since when its watch has not answered,
  and why (shown on every operation that waits for it, PROTOCOL §8.2).
- ``stale`` and ``stale_said``: its Dispatches refused DISPATCH_STALE in a row
  (C6c) and what the last refusal showed of the clocks; from
  ``STALE_WARN_AFTER`` on, every turn that waits for it says so.

The shell tells it what it saw, with the time; nothing here reads a clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from coordinator_svc.core.events import RunnerIdentity
from coordinator_svc.core.stale import STALE_WARN_AFTER

UNREACHABLE_AFTER = 3
# C2a: how recently a runner's live watch must have delivered something for a
# never-sent first attempt to skip its preflight (seconds; --live-within). Under
# load a runner's watch sends a row every few milliseconds; an idle one sends a
# heartbeat every 2 s, so its first turn after a quiet spell asks first.
LIVE_WITHIN = 0.5


@dataclass(frozen=True, slots=True)
class RunnerMemory:
    identity: RunnerIdentity | None = None
    heard_at: datetime | None = None
    trouble: int = 0
    down_since: datetime | None = None
    last_error: str = ""
    stale: int = 0
    stale_said: str = ""


_NOTHING = RunnerMemory()


class Runners:
    """Every member's :class:`RunnerMemory`, by runner name; ``live_within``: C2a's
    freshness (seconds)."""

    def __init__(self, live_within: float = LIVE_WITHIN) -> None:
        self._of: dict[str, RunnerMemory] = {}
        self._live_within = timedelta(seconds=live_within)

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

    def identified(
        self, runner: str, identity: RunnerIdentity | None, at: datetime | None = None
    ) -> None:
        """Its live watch knows who it is now, as GetRunnerInfo answered at ``at``
        (None: the stream is not live, and nothing heard from it counts)."""
        heard = at if identity is not None else None
        self._set(runner, dataclasses.replace(self.of(runner), identity=identity, heard_at=heard))

    def heard(self, runner: str, at: datetime) -> None:
        """It showed it was up at ``at``: its live watch delivered a message (a row, a
        heartbeat) or it answered a call. Counts only while the watch knows it."""
        was = self.of(runner)
        if was.identity is not None:
            self._set(runner, dataclasses.replace(was, heard_at=at))

    def live_identity(self, runner: str, now: datetime) -> RunnerIdentity | None:
        """C2a: who the runner is, if its live watch knows and delivered something
        within ``live_within`` of ``now``; else None (the first attempt asks first)."""
        known = self.of(runner)
        if known.identity is None or known.heard_at is None:
            return None
        if now - known.heard_at > self._live_within:
            return None
        return known.identity

    def down(self, runner: str, error: str, now: datetime) -> None:
        """Its watch failed; the first failure of a streak sets since when."""
        was = self.of(runner)
        since = was.down_since if was.down_since is not None else now
        self._set(runner, dataclasses.replace(was, down_since=since, last_error=error))

    def up(self, runner: str) -> None:
        self._set(runner, dataclasses.replace(self.of(runner), down_since=None, last_error=""))

    # --- stale Dispatches (C6c) ---

    def refused_stale(self, runner: str, said: str) -> bool:
        """One more Dispatch it refused DISPATCH_STALE, and what it showed of the
        clocks; True once per run, when it reaches STALE_WARN_AFTER (warn then)."""
        was = self.of(runner)
        self._set(runner, dataclasses.replace(was, stale=was.stale + 1, stale_said=said))
        return was.stale + 1 == STALE_WARN_AFTER

    def admitted(self, runner: str) -> None:
        """It admitted a Dispatch: the run of stale refusals is over."""
        was = self.of(runner)
        if was.stale:
            self._set(runner, dataclasses.replace(was, stale=0, stale_said=""))

    def stale_note(self, runner: str) -> str:
        """ "" unless its Dispatches keep being refused stale; else what to fix."""
        known = self.of(runner)
        if known.stale < STALE_WARN_AFTER:
            return ""
        return (
            f"runner {runner} refused its last {known.stale} Dispatches as stale "
            f"(DISPATCH_STALE): {known.stale_said}"
        )

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
