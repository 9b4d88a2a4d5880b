"""What the outside tells the coordinator between steps, as typed inputs.

The watch stream on each runner (``dispatcher.watching``) and the replica's
lease keeper (``dispatcher.replica``) feed these to the engine through one
entry point (``Dispatcher.feed``); neither reaches into the engine. Where an
input needs a rule (which lane a reported row takes, whether a runner left
out of routing is back), the driver decides it (``route_report``,
``runners.Runners``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from coordinator_svc.core.events import RunnerIdentity
from coordinator_svc.core.model import Execution, TurnKind
from coordinator_svc.core.runner_view import RunnerOp


@dataclass(frozen=True)
class RunnerAnswered:
    """Any message from ``runner`` (a watch heartbeat too): it answers now."""

    runner: str


@dataclass(frozen=True)
class RunnerUp:
    """``runner``'s watch reached it again (GetRunnerInfo answered)."""

    runner: str


@dataclass(frozen=True)
class RunnerSilent:
    """``runner``'s watch failed at ``at``, and why (its operations say so, §8.2)."""

    runner: str
    error: str
    at: datetime


@dataclass(frozen=True)
class RunnerIdentified:
    """Who ``runner`` is while its watch follows it live (C2a); None the moment the
    stream fails, ends or names another incarnation."""

    runner: str
    identity: RunnerIdentity | None


@dataclass(frozen=True)
class RunnerLearned:
    """What ``runner`` said of itself: its pool sizes (GetRunnerInfo, or a
    change its watch reported) and, from GetRunnerInfo, the executors it
    serves (C6b; None: not said this time). Empty sizes: it gets no slot
    (outside the version window)."""

    runner: str
    sizes: Mapping[TurnKind, int]
    executors: Sequence[str] | None = None


@dataclass(frozen=True)
class RunnerPools:
    """The runner's own count of its pools (sizes and slots in use) on a watch message."""

    runner: str
    sizes: Mapping[TurnKind, int]
    in_use: Mapping[TurnKind, int]


@dataclass(frozen=True)
class IncarnationSeen:
    """The watch saw ``runner`` as ``incarnation`` for the first time (C9):
    every operation bound to it under another incarnation is looked at now."""

    runner: str
    incarnation: str


@dataclass(frozen=True)
class RowReported:
    """A row of ``runner``'s store, as its watch stream sent it."""

    runner: str
    incarnation: str
    operation_id: str
    row: RunnerOp


@dataclass(frozen=True)
class LookAgain:
    """Look at this operation now (an orphan the lease keeper found, O3)."""

    operation_id: str


Input = (
    RunnerAnswered
    | RunnerUp
    | RunnerSilent
    | RunnerIdentified
    | RunnerLearned
    | RunnerPools
    | IncarnationSeen
    | RowReported
    | LookAgain
)


class ReportLane(enum.Enum):
    """What a reported row does (``route_report``)."""

    NOTHING = "released: our terminal commit came first"
    START_RIDES_ON_REPLY = "the held Dispatch reply takes the confirmed start (R3)"
    REPLY_DECIDES = "the Dispatch reply in flight decides"
    SETTLED_WHILE_HELD = "the settled row ends the held reply's wait, then is decided"
    DECIDE = "decided as a RunnerReported event"


def route_report(row: RunnerOp, *, dispatching: bool) -> ReportLane:
    """Which lane a watched row takes (C9; the held reply, R3).

    A released row needs nothing (released only after our terminal commit).
    While a Dispatch reply for it is on the way, an unsettled row is the
    reply's to decide (a confirmed start rides on it, so the RUNNING commit
    records STARTED without a commit of its own); a settled one ends the
    hold and is decided at once (DISPATCHING -> terminal in one commit)."""
    if row.released:
        return ReportLane.NOTHING
    if dispatching and not row.settled:
        if row.execution is Execution.STARTED:
            return ReportLane.START_RIDES_ON_REPLY
        return ReportLane.REPLY_DECIDES
    return ReportLane.SETTLED_WHILE_HELD if dispatching else ReportLane.DECIDE
