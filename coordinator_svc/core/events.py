"""What can happen to an operation: the inputs of the decide functions.

Every event is a frozen value built by the shell from a runner reply, a
client request or the passage of time. Replies carry what they were asked
about (``asked_attempt``: the attempt count when the call was made) so a
reply to an abandoned or superseded call is discarded (C8a).
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator_svc.core.commands import GiveUp
from coordinator_svc.core.runner_view import RunnerOp
from coordinator_svc.core.witness import StoreOpen


@dataclass(frozen=True)
class RunnerIdentity:
    """A runner's incarnation and store as the coordinator last heard them."""

    incarnation_id: str
    store_id: str


@dataclass(frozen=True)
class Tick:
    """The operation is due: do its next step. ``route`` is the runner the
    router picked, used only while QUEUED (C6: only QUEUED chooses)."""

    route: str | None = None
    # The route's identity, when the coordinator's live watch on it knows it
    # (None: unknown, so ask). Lets a never-sent first attempt skip the
    # preflight (C2a).
    route_identity: RunnerIdentity | None = None
    # Consecutive fruitless tries (unreachable runner), for backoff.
    retry_streak: int = 0
    # QUEUED without a route: why it waits (the scheduler's words), for the log.
    waiting: str = ""


@dataclass(frozen=True)
class Restarted:
    """The coordinator (re)started or took the operation over (C12)."""


@dataclass(frozen=True)
class PreflightAnswer:
    """A status answer (C2) from ``runner``: its incarnation, its store, and
    the row if present."""

    runner: str
    incarnation_id: str
    store_id: str
    durable: bool
    present: bool
    op: RunnerOp | None
    asked_attempt: int
    # The operation's last event sequence when the call was made (None: not
    # tracked). An answer asked before a later transition is stale (C8a).
    asked_sequence: int | None = None
    # The store's chain of openings, newest first (§6 witness; durable only).
    store_opens: tuple[StoreOpen, ...] = ()


@dataclass(frozen=True)
class PreflightFailed:
    """The status call got no answer (C8: the runner is unreachable)."""

    runner: str
    detail: str
    asked_attempt: int
    retry_streak: int = 0
    asked_sequence: int | None = None


@dataclass(frozen=True)
class DispatchAccepted:
    """The runner replied to Dispatch ``attempt`` with its row (R2, R3)."""

    attempt: int
    incarnation_id: str
    op: RunnerOp
    duplicate: bool = False


@dataclass(frozen=True)
class DispatchRefused:
    """A typed refusal (C6) of Dispatch ``attempt``; ``reason`` is an ErrorReason string.
    ``admission_floor``: the floor a DISPATCH_STALE refusal names (C6c: with the
    stamp it bounds the runner's clock skew), None when not said."""

    attempt: int
    reason: str
    incarnation_id: str = ""
    message: str = ""
    admission_floor: int | None = None


@dataclass(frozen=True)
class DispatchUnknown:
    """Dispatch ``attempt`` got no definite answer (C7)."""

    attempt: int
    detail: str


@dataclass(frozen=True)
class RunnerReported:
    """The runner's watch stream showed a change of the row (C9)."""

    runner: str
    incarnation_id: str
    op: RunnerOp


@dataclass(frozen=True)
class CancelRequested:
    """The operation's principal asked to cancel it (C11)."""


@dataclass(frozen=True)
class CancelAnswered:
    """The runner replied to Cancel; ``tombstoned`` means the id was unknown
    there and a tombstone now stands for it (R5)."""

    runner: str
    incarnation_id: str
    op: RunnerOp | None
    tombstoned: bool
    # Set when the Cancel was sent before giving up (coordinator_svc.core.give_up).
    give_up: GiveUp | None = None


@dataclass(frozen=True)
class CancelFailed:
    """Cancel got a typed refusal (``reason``) or no answer (``reason`` empty)."""

    runner: str
    reason: str
    incarnation_id: str = ""
    detail: str = ""
    retry_streak: int = 0
    give_up: GiveUp | None = None


@dataclass(frozen=True)
class ReleaseDone:
    """The runner was told it may drop the result (C10)."""


@dataclass(frozen=True)
class NotAMember:
    """A command was for a runner that is not a member of the runner set (removed,
    or never added: PROTOCOL.md §11 M6), so nothing was sent. ``command`` names
    it: ``status``, ``dispatch``, ``cancel`` or ``release``."""

    runner: str
    command: str
    asked_attempt: int
    asked_sequence: int | None = None


Event = (
    Tick
    | Restarted
    | PreflightAnswer
    | PreflightFailed
    | DispatchAccepted
    | DispatchRefused
    | DispatchUnknown
    | RunnerReported
    | CancelRequested
    | CancelAnswered
    | CancelFailed
    | ReleaseDone
    | NotAMember
)
