"""Values of the coordinator's world (PROTOCOL.md §1-§3), as frozen dataclasses.

These mirror the wire enums by name (``OpState.QUEUED`` <->
``OPERATION_STATE_QUEUED``) but stay free of generated code so the core is
importable without protobuf. The journal stores the enum *names*.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

# Shared with the runner, defined once (the names other modules import from here).
from turnwire.vocabulary import TERMINAL_STATES as TERMINAL_STATES
from turnwire.vocabulary import Execution as Execution
from turnwire.vocabulary import OperationState as OperationState
from turnwire.vocabulary import StopReason as StopReason
from turnwire.vocabulary import TurnKind as TurnKind

# The operation states and the terminal set are the vocabulary's (declared once).
OpState = OperationState


class ReplayPolicy(enum.StrEnum):
    PROBE_FIRST = "PROBE_FIRST"
    NEVER_AUTOMATIC = "NEVER_AUTOMATIC"
    SAFE = "SAFE"


class AttemptOutcome(enum.StrEnum):
    """How one Dispatch attempt ended, as far as the coordinator knows."""

    PENDING = "PENDING"  # written ahead (C4); the send may be on the wire
    ACCEPTED = "ACCEPTED"  # the runner acknowledged it on the bound incarnation
    REFUSED = "REFUSED"  # a typed, definite refusal (C6): it did not run
    UNKNOWN = "UNKNOWN"  # no definite answer (C7)


@dataclass(frozen=True)
class OperationRecord:
    """The current-state row of one operation."""

    operation_id: str
    principal: str
    idempotency_key_digest: str
    request_digest: str
    envelope: bytes
    envelope_digest: str
    pool: str
    kind: TurnKind
    replay_policy: ReplayPolicy
    max_attempts: int
    state: OpState
    execution: Execution
    created_at: datetime
    updated_at: datetime
    attempt_count: int = 0
    last_attempt_at: datetime | None = None
    # The runner and incarnation the operation is bound to once an attempt
    # may have reached it (C6: never moved to another runner after that).
    runner: str | None = None
    incarnation_id: str | None = None
    store_id: str | None = None
    # The runner acknowledged the operation on the bound incarnation; an
    # acknowledged operation that vanishes is a PROTOCOL_ERROR (C9, C11).
    acknowledged: bool = False
    fencing_token: int = 1
    version: int = 1
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    cancel_requested: bool = False
    stop_reason: StopReason | None = None
    # Serialized turnwire.common.v1.TurnResult, set when SUCCEEDED.
    result: bytes | None = None
    error_reason: str | None = None
    error_message: str | None = None
    # Earliest time the dispatcher should look at it again (backoff).
    next_action_at: datetime | None = None
    # First time it became DISPATCH_UNKNOWN in the current ambiguity; the
    # reconcile deadline counts from here (C8).
    unknown_since: datetime | None = None
    # The runner was told it may release the result (C10).
    released: bool = False
    finished_at: datetime | None = None
    last_event_sequence: int = 0
    # Every execution of the executor as the bound runner last reported them
    # (R15): a serialized turnwire.common.v1.ExecutionLog; None before any.
    executions: bytes | None = None
    # How many executions those records hold (R15).
    execution_count: int = 0


@dataclass(frozen=True)
class AttemptRecord:
    """One Dispatch attempt (C13). Written before the send (C4)."""

    operation_id: str
    number: int
    runner: str
    incarnation_id: str
    store_id: str | None
    sent_at: datetime
    outcome: AttemptOutcome = AttemptOutcome.PENDING
    detail: str = ""


@dataclass(frozen=True)
class EventRecord:
    """One appended transition (C13); sequence is per operation, from 1."""

    operation_id: str
    sequence: int
    from_state: OpState | None
    to_state: OpState
    execution: Execution
    at: datetime
    reason: str = ""
    detail: str = ""


@dataclass(frozen=True)
class AttemptUpdate:
    """Close an attempt with its outcome."""

    number: int
    outcome: AttemptOutcome
    detail: str = ""


@dataclass(frozen=True)
class Change:
    """One atomic journal write: the new current-state row, the event that
    explains it, and the attempt rows it adds or closes.

    The adapter applies it as a compare-and-set on ``(before.version,
    before.fencing_token)`` and stores ``after`` with ``version + 1``.
    ``event`` is None only for bookkeeping writes that change no state
    (lease, backoff, released flag).
    """

    before: OperationRecord
    after: OperationRecord
    event: EventRecord | None = None
    new_attempt: AttemptRecord | None = None
    attempt_updates: tuple[AttemptUpdate, ...] = field(default_factory=tuple)
