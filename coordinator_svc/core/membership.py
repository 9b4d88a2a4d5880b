"""Which runners the coordinators use: the membership records and their rules (PROTOCOL.md §11).

Pure. The journal keeps an append-only log per runner name (M1): numbered
records, each ``ADDED`` (with the member's address, pool and kinds) or
``REMOVED``. A name's *latest* record decides: ``ADDED`` makes it a member
whose generation is that record's number; ``REMOVED`` (or no record) makes
it none. What is decided here:

    add_outcome       an AddRunner against the name's latest record      (M2)
    removal_refusal   a RemoveRunner against it, its drain and its turns (M3, M4)
    flag_plan         the --runner flags against the journal at start     (M8)
    members_of        the set the latest records make                     (M1)
    membership_change what a coordinator must build and close to follow (M5)

The I/O is in the journal adapters (``storage.membership_sql``, ``_fake``),
``api.admin_runners`` and ``dispatcher.engine.Dispatcher.set_runners``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.model import OpState, TurnKind
from coordinator_svc.core.operator import DrainRecord

# An operation in one of these states is bound to its runner (C6: an attempt
# may have reached it); only these keep a runner from being removed (M3).
BOUND_STATES: tuple[OpState, ...] = (
    OpState.DISPATCHING,
    OpState.DISPATCH_UNKNOWN,
    OpState.RUNNING,
    OpState.CANCELLING,
)
# Who recorded a member taken from a --runner flag at start (M8).
FLAG_RECORDER = "--runner"


def kinds_text(kinds: Iterable[TurnKind]) -> str:
    """``READ_ONLY+WRITABLE``: kinds as the journal and the messages write them."""
    return "+".join(sorted(kind.value for kind in kinds))


def kinds_from_text(text: str) -> frozenset[TurnKind]:
    return frozenset(TurnKind(name) for name in text.split("+") if name)


class MemberAction(enum.StrEnum):
    ADDED = "ADDED"
    REMOVED = "REMOVED"


@dataclass(frozen=True)
class MembershipRecord:
    """One record of a runner name's log (M1): append-only, never updated or deleted.

    ``sequence`` numbers a name's records from 1; an ``ADDED`` record's is the
    member's generation. A ``REMOVED`` record repeats the removed member's
    fields, says whether the removal was forced and how many turns were bound
    to it then (M4).
    """

    runner: str
    sequence: int
    action: MemberAction
    address: str
    pool: str
    kinds: frozenset[TurnKind]
    recorded_by: str
    reason: str
    recorded_at: datetime
    forced: bool = False
    bound_turns: int = 0

    @property
    def endpoint(self) -> RunnerEndpoint:
        return RunnerEndpoint(self.runner, self.address, self.pool, self.kinds, self.sequence)

    @property
    def is_member(self) -> bool:
        return self.action is MemberAction.ADDED


def added(
    endpoint: RunnerEndpoint, by: str, reason: str, at: datetime, sequence: int = 0
) -> MembershipRecord:
    """The ADDED record for ``endpoint`` (its sequence is the journal's to give)."""
    return MembershipRecord(
        endpoint.name,
        sequence,
        MemberAction.ADDED,
        endpoint.address,
        endpoint.pool,
        endpoint.kinds,
        by,
        reason,
        at,
    )


def removed(
    member: MembershipRecord, by: str, reason: str, at: datetime, *, forced: bool, bound: int
) -> MembershipRecord:
    """The REMOVED record that follows ``member`` (an ADDED record) in its name's log."""
    return MembershipRecord(
        member.runner,
        member.sequence + 1,
        MemberAction.REMOVED,
        member.address,
        member.pool,
        member.kinds,
        by,
        reason,
        at,
        forced=forced,
        bound_turns=bound,
    )


@dataclass(frozen=True)
class RunnerRoster:
    """What a coordinator reads to follow the set (M5): each name's latest record
    (member or not) and the drains (V8), read together."""

    latest: tuple[MembershipRecord, ...] = ()
    drains: tuple[DrainRecord, ...] = ()

    @property
    def members(self) -> tuple[RunnerEndpoint, ...]:
        return members_of(self.latest)

    @property
    def drained(self) -> frozenset[str]:
        return frozenset(d.runner for d in self.drains)

    def record_of(self, runner: str) -> MembershipRecord | None:
        return next((r for r in self.latest if r.runner == runner), None)


class MemberRefusal(enum.StrEnum):
    """Why a membership act is refused; the names are ErrorReason strings."""

    RUNNER_NOT_FOUND = "RUNNER_NOT_FOUND"
    RUNNER_CONFLICT = "RUNNER_CONFLICT"
    RUNNER_NOT_DRAINED = "RUNNER_NOT_DRAINED"
    RUNNER_HAS_TURNS = "RUNNER_HAS_TURNS"


class AddOutcome(enum.Enum):
    STORE = "store"  # a new member: the name's next record
    REPLAY = "replay"  # the live member has these fields: nothing to store


def add_outcome(
    latest: MembershipRecord | None, wanted: RunnerEndpoint
) -> AddOutcome | MemberRefusal:
    """M2: adding ``wanted`` after the name's ``latest`` record."""
    if latest is None or not latest.is_member:
        return AddOutcome.STORE
    if latest.endpoint.same_fields(wanted):
        return AddOutcome.REPLAY
    return MemberRefusal.RUNNER_CONFLICT


def removal_refusal(
    latest: MembershipRecord | None,
    *,
    generation: int,
    drained: bool,
    bound: int,
    force: bool,
) -> MemberRefusal | None:
    """M3/M4: may the name's live member (of ``generation``, 0: whichever) go now?

    None when it may. A name that is not a member now, or whose member is of
    another generation than asked, is RUNNER_NOT_FOUND, except that asking
    again for the removal that ``latest`` records is answered by the caller as
    a replay (``removal_replayed``)."""
    if latest is None or not latest.is_member:
        return MemberRefusal.RUNNER_NOT_FOUND
    if generation and latest.sequence != generation:
        return MemberRefusal.RUNNER_NOT_FOUND
    if force:
        return None
    if not drained:
        return MemberRefusal.RUNNER_NOT_DRAINED
    if bound:
        return MemberRefusal.RUNNER_HAS_TURNS
    return None


def removal_replayed(latest: MembershipRecord | None, generation: int) -> bool:
    """The name's latest record already removes the member asked for (any, or ``generation``)."""
    if latest is None or latest.is_member:
        return False
    return not generation or latest.sequence == generation + 1


def members_of(latest: Iterable[MembershipRecord]) -> tuple[RunnerEndpoint, ...]:
    """M1: the members the names' latest records make, by name."""
    return tuple(sorted((r.endpoint for r in latest if r.is_member), key=lambda e: e.name))


@dataclass(frozen=True)
class FlagPlan:
    """What the --runner flags mean against the journal at start (M8)."""

    to_add: tuple[RunnerEndpoint, ...] = ()
    # (flag, the REMOVED record that stands): not re-added, a WARNING with the fix.
    removed: tuple[tuple[RunnerEndpoint, MembershipRecord], ...] = ()
    # (flag, the live member it disagrees with): the start is refused.
    conflicts: tuple[tuple[RunnerEndpoint, MembershipRecord], ...] = ()


def flag_plan(flags: Sequence[RunnerEndpoint], latest: Iterable[MembershipRecord]) -> FlagPlan:
    """M8: a flag naming a name never seen is added; one agreeing with the live
    member is nothing; one naming a removed runner is not re-added; one that
    disagrees with the live member refuses the start."""
    by_name = {record.runner: record for record in latest}
    to_add, gone, conflicts = [], [], []
    for flag in flags:
        record = by_name.get(flag.name)
        if record is None:
            to_add.append(flag)
        elif not record.is_member:
            gone.append((flag, record))
        elif not record.endpoint.same_fields(flag):
            conflicts.append((flag, record))
    return FlagPlan(tuple(to_add), tuple(gone), tuple(conflicts))


@dataclass(frozen=True)
class MembershipChange:
    """What a coordinator builds and closes to go from one member set to another (M5)."""

    added: tuple[RunnerEndpoint, ...]
    removed: tuple[RunnerEndpoint, ...]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed)


def membership_change(
    before: Iterable[RunnerEndpoint], after: Iterable[RunnerEndpoint]
) -> MembershipChange:
    """Members are equal only with every field, generation included: a name added
    again (a new generation) is closed and built anew, never carried over (M7)."""
    old, new = set(before), set(after)
    return MembershipChange(
        added=tuple(sorted(new - old, key=lambda e: e.name)),
        removed=tuple(sorted(old - new, key=lambda e: e.name)),
    )
