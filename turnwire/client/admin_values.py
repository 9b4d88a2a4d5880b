"""What the operator's client (``AdminClient``) hands out: frozen dataclasses and str enums.

The AdminService messages (``proto/turnwire/coordinator/v1/admin.proto``,
``docs/ADMIN_API.md``) mirrored the way ``turnwire.client.values`` mirrors
TurnService's: callers never see a protobuf, enum names lose their wire prefix
(``ATTEMPT_OUTCOME_REFUSED`` -> ``AttemptOutcome.REFUSED``), and a value this
SDK does not know yet (a newer server) reads as ``UNSPECIFIED``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from turnwire.client.values import (
    Operation,
    OperationEvent,
    OperatorVerdict,
    TurnKind,
    _enum_from_proto,
    _timestamp,
    execution_from_proto,
    state_from_proto,
)
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import admin_pb2, coordinator_pb2

_OUTCOME = admin_pb2.AttemptOutcome.DESCRIPTOR
_ACTION = admin_pb2.MembershipAction.DESCRIPTOR
_KIND = turn_pb2.TurnKind.DESCRIPTOR


def _kinds(numbers: Iterable[int]) -> tuple[TurnKind, ...]:
    return tuple(_enum_from_proto(TurnKind, _KIND, "TURN_KIND_", n) for n in numbers)


class MembershipAction(enum.StrEnum):
    """What a runner membership record says (PROTOCOL.md §11 M1)."""

    UNSPECIFIED = "UNSPECIFIED"
    ADDED = "ADDED"
    REMOVED = "REMOVED"


class AttemptOutcome(enum.StrEnum):
    """How one Dispatch attempt ended, as far as the coordinator knows (C13)."""

    UNSPECIFIED = "UNSPECIFIED"
    PENDING = "PENDING"  # written ahead (C4); the send may be on the wire
    ACCEPTED = "ACCEPTED"  # acknowledged on the bound incarnation
    REFUSED = "REFUSED"  # a typed, definite refusal (C6): it did not run
    UNKNOWN = "UNKNOWN"  # no definite answer (C7)


@dataclass(frozen=True)
class Attempt:
    """One Dispatch attempt as the journal recorded it (C4, C13)."""

    number: int
    runner: str
    incarnation_id: str
    # The runner's store id when it was sent; "" if the runner gave none.
    store_id: str
    sent_at: datetime | None
    outcome: AttemptOutcome
    # What the runner said, or why there is no answer.
    detail: str

    @classmethod
    def from_proto(cls, message: admin_pb2.Attempt) -> Attempt:
        return cls(
            number=message.number,
            runner=message.runner,
            incarnation_id=message.incarnation_id,
            store_id=message.store_id,
            sent_at=_timestamp(message.sent_at),
            outcome=_enum_from_proto(AttemptOutcome, _OUTCOME, "ATTEMPT_OUTCOME_", message.outcome),
            detail=message.detail,
        )


@dataclass(frozen=True)
class AdminOperation:
    """An operation as the operator sees it: the public Operation plus whose it is."""

    operation: Operation
    # The principal that submitted it (for a requeued operation: the original's).
    principal: str

    @property
    def operation_id(self) -> str:
        return self.operation.operation_id

    @classmethod
    def from_proto(cls, message: admin_pb2.AdminOperation) -> AdminOperation:
        return cls(operation=Operation.from_proto(message.operation), principal=message.principal)


def event_from_proto(event: coordinator_pb2.OperationEvent) -> OperationEvent:
    """A bare journal event (no operation snapshot attached)."""
    return OperationEvent(
        operation_id=event.operation_id,
        sequence=event.sequence,
        from_state=state_from_proto(event.from_state),
        to_state=state_from_proto(event.to_state),
        execution=execution_from_proto(event.execution),
        reason=event.reason,
        detail=event.detail,
        at=_timestamp(event.at),
    )


@dataclass(frozen=True)
class OperationEvidence:
    """Everything the journal holds that bears on whether an operation executed."""

    operation: AdminOperation
    attempts: tuple[Attempt, ...]
    # Every event by sequence: each preflight answer, Dispatch reply and
    # conclusion the coordinator acted on is in its reason and detail.
    events: tuple[OperationEvent, ...]
    # Every verdict record, oldest first (at most one today: a verdict is final).
    verdicts: tuple[OperatorVerdict, ...]

    @property
    def operation_id(self) -> str:
        return self.operation.operation_id

    @classmethod
    def from_proto(cls, message: admin_pb2.OperationEvidence) -> OperationEvidence:
        return cls(
            operation=AdminOperation.from_proto(message.operation),
            attempts=tuple(Attempt.from_proto(a) for a in message.attempts),
            events=tuple(event_from_proto(e) for e in message.events),
            verdicts=tuple(OperatorVerdict.from_proto(v) for v in message.verdicts),
        )


@dataclass(frozen=True)
class Runner:
    """A member of the runner set as the coordinator that answered sees it now.

    ``generation`` tells members of one name apart (a name removed and added
    again is a new member, PROTOCOL.md §11 M7); ``bound_turns`` counts the
    operations bound to it that are not terminal, across every replica
    (RemoveRunner without force waits for 0)."""

    name: str
    address: str
    pools: tuple[str, ...]
    # Its identity while the coordinator's watch stream on it is live ("" if unknown).
    incarnation_id: str
    store_id: str
    # Slots per kind (0 when unknown) and turns bound or being preflighted there.
    writable_slots: int
    read_only_slots: int
    writable_in_use: int
    read_only_in_use: int
    answering: bool
    # In words: "answering", "not answered 4 calls in a row since ...", ...
    health: str
    drained: bool
    drained_by: str = ""
    drain_reason: str = ""
    drained_at: datetime | None = None
    kinds: tuple[TurnKind, ...] = ()
    generation: int = 0
    added_by: str = ""
    added_reason: str = ""
    added_at: datetime | None = None
    bound_turns: int = 0
    # The executors it serves, as its GetRunnerInfo said (PROTOCOL C6b); empty
    # while the coordinator does not know.
    executors: tuple[str, ...] = ()

    @property
    def capacity(self) -> int:
        return self.writable_slots + self.read_only_slots

    @property
    def in_use(self) -> int:
        return self.writable_in_use + self.read_only_in_use

    @classmethod
    def from_proto(cls, message: admin_pb2.Runner) -> Runner:
        return cls(
            name=message.name,
            address=message.address,
            pools=tuple(message.pools),
            incarnation_id=message.incarnation_id,
            store_id=message.store_id,
            writable_slots=message.writable_slots,
            read_only_slots=message.read_only_slots,
            writable_in_use=message.writable_in_use,
            read_only_in_use=message.read_only_in_use,
            answering=message.answering,
            health=message.health,
            drained=message.drained,
            drained_by=message.drained_by,
            drain_reason=message.drain_reason,
            drained_at=_timestamp(message.drained_at),
            kinds=_kinds(message.kinds),
            generation=message.generation,
            added_by=message.added_by,
            added_reason=message.added_reason,
            added_at=_timestamp(message.added_at),
            bound_turns=message.bound_turns,
            executors=tuple(message.executors),
        )


@dataclass(frozen=True)
class MembershipRecord:
    """One record of a runner name's membership log (append-only, §11 M1)."""

    runner: str
    sequence: int
    action: MembershipAction
    address: str
    pool: str
    kinds: tuple[TurnKind, ...]
    recorded_by: str
    reason: str
    recorded_at: datetime | None
    # REMOVED only: forced (M4), and how many turns were bound to it then.
    forced: bool = False
    bound_turns: int = 0

    @classmethod
    def from_proto(cls, message: admin_pb2.MembershipRecord) -> MembershipRecord:
        return cls(
            runner=message.runner,
            sequence=message.sequence,
            action=_enum_from_proto(
                MembershipAction, _ACTION, "MEMBERSHIP_ACTION_", message.action
            ),
            address=message.address,
            pool=message.pool,
            kinds=_kinds(message.kinds),
            recorded_by=message.recorded_by,
            reason=message.reason,
            recorded_at=_timestamp(message.recorded_at),
            forced=message.forced,
            bound_turns=message.bound_turns,
        )


@dataclass(frozen=True)
class AdminOperationPage:
    """One page of AdminClient.list_operations; ``next_page_token`` is "" on the last."""

    operations: tuple[AdminOperation, ...]
    next_page_token: str


@dataclass(frozen=True)
class EvidencePage:
    """One page of AdminClient.list_ambiguous; ``next_page_token`` is "" on the last."""

    operations: tuple[OperationEvidence, ...]
    next_page_token: str


@dataclass(frozen=True)
class VerdictRecorded:
    """What record_verdict returns: the operation with ``operation.verdict`` set.

    ``replayed`` is True when this same verdict was already on record (the
    first record, its reason, ``by`` and ``at``, stands), also when it was
    this call's own earlier try whose reply was lost and retried.
    """

    operation: AdminOperation
    replayed: bool


@dataclass(frozen=True)
class Requeued:
    """What requeue returns: the NEW operation and the original, linked both ways.

    ``replayed`` is True when the original had already been requeued: the same
    new operation is returned and nothing new was made.
    """

    operation: AdminOperation
    original: AdminOperation
    replayed: bool


@dataclass(frozen=True)
class RunnerChanged:
    """What drain and undrain return: the runner now; ``replayed`` when it was
    already in that state (nothing changed; a drain's first reason stands)."""

    runner: Runner
    replayed: bool


@dataclass(frozen=True)
class RunnerRemoved:
    """What remove_runner returns: the REMOVED record; ``replayed`` when that removal
    was already recorded (nothing changed)."""

    removal: MembershipRecord
    replayed: bool
