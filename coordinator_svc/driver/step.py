"""One step of one operation: load, judge who may act, decide, commit.

Theory of operation. A step is a generator: it yields each read or write it
needs as an *effect* (:class:`Load`, :class:`LoadAttempts`, :class:`Claim`,
:class:`Commit`, :class:`HoldForGrant`, :class:`Adopted`), the shell performs
it and sends the outcome back, and the step returns how it ended
(:class:`Stepped` or a :class:`NoStep`). It decides everything in between:

- **Who may act** (§5, O1-O5): with a :class:`Replica`, its own lease makes it
  the owner; another owner's lapsed lease is adopted (a :class:`Claim` moves
  the fencing token on, then C12's ``Restarted`` is committed: DISPATCHING
  becomes DISPATCH_UNKNOWN, never sent blindly again); a client's cancel on
  another replica's operation is stored as a mark for its owner
  (``mark_requested``, nothing sent); anything else is not ours. A replica
  whose leases are not current does nothing at all (O4).
- **Who routes** (C6): only the scheduler routes a QUEUED turn. A Tick
  without a route on a QUEUED turn that no grant is routing now holds it for
  a grant (:class:`HoldForGrant`) and is decided as a wait, with the
  scheduler's reason.
- **A write is a compare-and-set** (C13): a stale version reads and decides
  again (bounded by ``MAX_CAS_RETRIES``); a lost lease ends the step and
  nothing more is sent for the operation (§5). A cancel mark refused either
  way is judged again from a fresh read: the operation moved on, or was
  adopted meanwhile.
- **Persist before you send** (C4): the step returns the decision only with
  the record as committed; its commands are the shell's to perform after.

The generator runs the same in the asyncio engine (``dispatcher.engine``)
and in the deterministic simulation (``tests/simulation``): each performs
the effects against its own journal, the step is the one that ships.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Generator
from dataclasses import dataclass

from coordinator_svc.core.decide import decide
from coordinator_svc.core.decide_cancel import mark_requested
from coordinator_svc.core.decision import Context, Decision, nothing
from coordinator_svc.core.edges import IllegalTransition
from coordinator_svc.core.events import CancelRequested, Event, Restarted, Tick
from coordinator_svc.core.model import AttemptRecord, Change, OperationRecord, OpState
from coordinator_svc.core.ownership import Role, role

# Bounds on every loop (never spin forever on one operation).
MAX_CAS_RETRIES = 16
ADOPT_RETRIES = 4

Policy = Callable[[OperationRecord, Event, Context], Decision]
# The decision context for a record and its attempt rows (the shell's clock,
# timings and the turn's own limits: data, not rules).
ContextFor = Callable[[tuple[AttemptRecord, ...], OperationRecord], Context]


# --- effects: what the shell performs, and what it sends back -----------------


@dataclass(frozen=True)
class Load:
    """Read the operation's record. Send back ``OperationRecord | None``."""

    operation_id: str


@dataclass(frozen=True)
class LoadAttempts:
    """Read its attempt rows. Send back ``tuple[AttemptRecord, ...]``."""

    operation_id: str


@dataclass(frozen=True)
class Claim:
    """O3: take over ``record``'s lapsed lease (a write: the fencing token moves
    on). Send back the claimed record, or None if it is no longer an orphan."""

    record: OperationRecord


class Refused(enum.Enum):
    """Why a compare-and-set commit stored nothing."""

    STALE = "stale version"  # someone wrote since the read (C13)
    LEASE_LOST = "lease lost"  # the lease is another replica's now (§5)


@dataclass(frozen=True)
class Commit:
    """Store ``change`` as a compare-and-set. Send back the stored record, or a
    :class:`Refused`. ``before`` is the record it was decided on; ``mark``: a
    cancel stored for another replica's operation (§5 O5: not ours to count,
    route or send for); ``adopting``: C12's commit of an adoption (O3)."""

    change: Change
    decision: Decision
    before: OperationRecord
    mark: bool = False
    adopting: bool = False


@dataclass(frozen=True)
class HoldForGrant:
    """C6: hold this QUEUED turn for the scheduler's grant. Send back why it
    waits, in the scheduler's words ("" when it can say nothing)."""

    record: OperationRecord


@dataclass(frozen=True)
class Adopted:
    """O3: this replica now drives ``record`` (adopted, C12 applied): let the
    scheduler count it. Send back None."""

    record: OperationRecord


Effect = Load | LoadAttempts | Claim | Commit | HoldForGrant | Adopted


# --- how a step ends ------------------------------------------------------------


class NoStep(enum.Enum):
    """A step that decided nothing about the operation."""

    UNKNOWN = "no such operation"
    NOT_OURS = "another replica's lease"
    LEASES_NOT_CURRENT = "this replica's leases are not current (O4)"
    LEASE_LOST = "lease lost while committing"
    GAVE_UP = "too many stale versions"


@dataclass(frozen=True)
class Stepped:
    """The record as now stored and the decision made on it. ``committed``: its
    change was stored by this step (its commands may now be performed);
    ``illegal``: the core refused the event (IllegalTransition), nothing done."""

    record: OperationRecord
    decision: Decision
    committed: bool = False
    mark: bool = False
    illegal: bool = False


StepEnd = Stepped | NoStep
StepMachine = Generator[Effect, object, StepEnd]


@dataclass(frozen=True)
class Replica:
    """This process as one replica of several (§5): its lease owner string, and
    whether its leases are current (renewed within their TTL: O4)."""

    owner: str
    current: bool = True


def step(
    operation_id: str,
    event: Event,
    context_for: ContextFor,
    *,
    replica: Replica | None = None,
    routes_by_grant: bool = False,
    routing: Callable[[str], bool] = lambda operation_id: False,
    policy: Policy = decide,
) -> StepMachine:
    """Decide ``event`` for ``operation_id`` (see the module docstring).

    ``routes_by_grant``: a scheduler routes QUEUED turns here (C6), and
    ``routing(operation_id)`` says whether a grant is routing it now. ``policy`` is the core's
    ``decide`` (the simulation's teeth tests pass a broken one)."""
    if replica is not None and not replica.current:
        return NoStep.LEASES_NOT_CURRENT
    for _ in range(MAX_CAS_RETRIES):
        record = yield Load(operation_id)
        if record is None:
            return NoStep.UNKNOWN
        assert isinstance(record, OperationRecord)
        mark: Decision | None = None
        if replica is not None:
            now = context_for((), record).now
            match role(record, replica.owner, now, cancel=isinstance(event, CancelRequested)):
                case Role.BYSTANDER:
                    return NoStep.NOT_OURS
                case Role.CANCEL_MARK:
                    context = dataclasses.replace(context_for((), record), replica_id="")
                    mark = mark_requested(record, context)
                case Role.ADOPTER:
                    adopted = yield from _adopt(record, context_for, policy)
                    if adopted is None:
                        return NoStep.NOT_OURS
                    record = adopted
                case Role.OWNER:
                    pass
        try:
            if mark is not None:
                decision = mark
            else:
                attempts = yield from _attempts(record)
                routed = yield from _routed(record, event, routes_by_grant, routing)
                decision = policy(record, routed, context_for(attempts, record))
        except IllegalTransition as error:
            return Stepped(record, nothing(str(error)), illegal=True)
        if decision.change is None:
            return Stepped(record, decision)
        stored = yield Commit(decision.change, decision, record, mark=mark is not None)
        if stored is Refused.STALE:
            continue
        if stored is Refused.LEASE_LOST:
            if mark is not None:
                continue  # adopted meanwhile: mark the new owner's row
            return NoStep.LEASE_LOST
        assert isinstance(stored, OperationRecord)
        return Stepped(stored, decision, committed=True, mark=mark is not None)
    return NoStep.GAVE_UP


def _attempts(record: OperationRecord) -> Generator[Effect, object, tuple[AttemptRecord, ...]]:
    if not record.attempt_count:
        return ()
    rows = yield LoadAttempts(record.operation_id)
    assert isinstance(rows, tuple)
    return rows


def _routed(
    record: OperationRecord, event: Event, routes_by_grant: bool, routing: Callable[[str], bool]
) -> Generator[Effect, object, Event]:
    """C6: only the scheduler routes a QUEUED turn. Any other tick holds it for
    a grant; a grant's own tick carries its runner (its slot reserved)."""
    if not routes_by_grant or not isinstance(event, Tick) or record.state is not OpState.QUEUED:
        return event
    if event.route is not None or routing(record.operation_id):
        return event
    reason = yield HoldForGrant(record)
    assert isinstance(reason, str)
    return Tick(waiting=reason or "a slot was granted")


def _adopt(
    record: OperationRecord, context_for: ContextFor, policy: Policy
) -> Generator[Effect, object, OperationRecord | None]:
    """O3: claim an orphan, then apply C12 (``Restarted``) to it before anything
    else: a Dispatch may have left its old owner, so DISPATCHING becomes
    DISPATCH_UNKNOWN and is reconciled, never sent blindly again. None if
    another replica took it first."""
    claimed = yield Claim(record)
    if claimed is None:
        return None
    assert isinstance(claimed, OperationRecord)
    owner = claimed.lease_owner
    current = claimed
    for _ in range(ADOPT_RETRIES):
        attempts = yield from _attempts(current)
        decision = policy(current, Restarted(), context_for(attempts, current))
        if decision.change is None:
            break
        stored = yield Commit(decision.change, decision, current, adopting=True)
        if isinstance(stored, OperationRecord):
            current = stored
            break
        # A cancel mark landed between the claim and this commit: read again.
        reread = yield Load(current.operation_id)
        if reread is None:
            return None
        assert isinstance(reread, OperationRecord)
        if reread.lease_owner != owner:
            return None
        current = reread
    yield Adopted(current)
    return current
