"""What the shell must do after a decision's Change is committed.

Commands are performed only after the commit succeeded (persist before you
send), and not at all if the commit lost the lease (§5).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Preflight:
    """Ask ``runner`` for the operation's status (C2, C8, C9)."""

    runner: str


@dataclass(frozen=True)
class Dispatch:
    """Send attempt ``attempt`` bound to ``incarnation_id`` (C5)."""

    runner: str
    attempt: int
    incarnation_id: str
    fencing_token: int
    # The attempt's sent_at in microseconds (§6 witness; turnwire.ids.dispatch_stamp).
    dispatch_stamp: int = 0


@dataclass(frozen=True)
class GiveUp:
    """Why a Cancel is sent before giving up (C14): a tombstone in reply proves
    NOT_STARTED; without one the operation ends ``reason`` with ``detail``."""

    reason: str
    detail: str


@dataclass(frozen=True)
class Cancel:
    """Ask ``runner`` to stop the operation on ``incarnation_id`` (C11).

    ``give_up`` set: the coordinator is ending the operation and asks for a
    tombstone first (R5); the reply comes back carrying it."""

    runner: str
    incarnation_id: str
    fencing_token: int
    give_up: GiveUp | None = None


@dataclass(frozen=True)
class Release:
    """Tell ``runner`` it may drop the stored result (C10)."""

    runner: str
    incarnation_id: str
    fencing_token: int
    # Record ``released`` afterwards (only when the terminal write left it unset).
    record: bool = False


@dataclass(frozen=True)
class ScheduleAt:
    """Look at the operation again no earlier than ``at`` (backoff, polls)."""

    at: datetime


@dataclass(frozen=True)
class Alarm:
    """A protocol alarm: a runner said something that contradicts the contract
    or the recorded terminal state (C10). Logged and counted; changes nothing."""

    reason: str
    detail: str


Command = Preflight | Dispatch | Cancel | Release | ScheduleAt | Alarm
