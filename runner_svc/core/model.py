"""The runner's values: row states, execution truth, stop reasons, slot kinds.

Plain enums and frozen dataclasses, free of grpc, SQLAlchemy and the
generated stubs, so the decisions in this package can be tested as tables.
The string values are what the store keeps; they are never renamed.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from turnwire import vocabulary


class RowState(enum.StrEnum):
    """What the runner's store says about one operation (runner.proto)."""

    ACCEPTED = "ACCEPTED"  # dedupe row durable, no launch intent (R3)
    LAUNCHING = "LAUNCHING"  # launch intent durable, start not confirmed
    RUNNING = "RUNNING"  # start confirmed
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"
    TOMBSTONED = "TOMBSTONED"  # a Cancel for an unknown id (R5)
    # Never stored: how a row an earlier incarnation left LAUNCHING or
    # RUNNING is reported after a restart (see report.py).
    INTERRUPTED = "INTERRUPTED"


SETTLED_STATES: frozenset[RowState] = frozenset(
    {
        RowState.SUCCEEDED,
        RowState.FAILED,
        RowState.CANCELLED,
        RowState.TIMED_OUT,
        RowState.TOMBSTONED,
    }
)
# States in which an executor may be live (the slot is held).
IN_FLIGHT_STATES: frozenset[RowState] = frozenset({RowState.LAUNCHING, RowState.RUNNING})


# One vocabulary for both services (checked against the proto in
# tests/contract/test_vocabulary.py); the runner calls the turn kind its slot kind.
Execution = vocabulary.Execution
StopReason = vocabulary.StopReason
SlotKind = vocabulary.TurnKind
DeclaredEffect = vocabulary.DeclaredEffect

# The name of the executor a turn gets when its envelope names none (R14).
DEFAULT_EXECUTOR = vocabulary.DEFAULT_EXECUTOR


class Refusal(enum.StrEnum):
    """Why the runner refused a call; values are errors.proto reason strings."""

    INCARNATION_MISMATCH = "INCARNATION_MISMATCH"
    NO_FREE_SLOT = "NO_FREE_SLOT"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    STORE_WRITE_FAILED = "STORE_WRITE_FAILED"
    ENVELOPE_MISMATCH = "ENVELOPE_MISMATCH"
    CANCELLED_BEFORE_DISPATCH = "CANCELLED_BEFORE_DISPATCH"
    STALE_FENCING_TOKEN = "STALE_FENCING_TOKEN"
    ENVELOPE_INVALID = "ENVELOPE_INVALID"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    ARGUMENT_INVALID = "ARGUMENT_INVALID"
    DISPATCH_STALE = "DISPATCH_STALE"
    # Not definite (§9 K3): the row is pruned, only its key is kept.
    OPERATION_PRUNED = "OPERATION_PRUNED"
    # R14: the envelope names an executor this runner does not serve (definite).
    EXECUTOR_NOT_SERVED = "EXECUTOR_NOT_SERVED"
    # StreamOutput (R13): no row for the id / no stream this incarnation holds.
    OPERATION_NOT_FOUND = "OPERATION_NOT_FOUND"
    OUTPUT_UNAVAILABLE = "OUTPUT_UNAVAILABLE"


class RunnerRefusal(Exception):
    """A typed refusal: nothing was accepted and nothing changed (C6)."""

    def __init__(
        self, refusal: Refusal, message: str, details: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(f"{refusal}: {message}")
        self.refusal = refusal
        self.message = message
        # Extra ErrorInfo metadata the refusal names (say the executor asked for).
        self.details: Mapping[str, str] = dict(details or {})


@dataclass(frozen=True)
class TurnFailure:
    """A typed failure: ``reason`` is an errors.proto reason string.

    ``effect``: what the executor declared about effects downstream (None:
    nothing declared, unknown); ``retry_after``: its hint, in seconds, for the
    earliest useful retry (with effect NONE only)."""

    reason: str
    message: str = ""
    effect: DeclaredEffect | None = None
    retry_after: float | None = None


@dataclass(frozen=True)
class TurnOutput:
    """What a succeeded execution produced."""

    output: bytes
    content_type: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecutionRecord:
    """One execution of a row's executor (R15): numbered from 1, never overlapping.

    ``execution``: this execution's own start truth (R3, per execution):
    UNKNOWN with its launch intent alone, STARTED once confirmed or ended,
    NOT_STARTED when its start was refused. ``outcome`` is None until it
    ended (a runner that died first leaves it open: INTERRUPTED)."""

    number: int
    launched_at: float
    execution: Execution = Execution.UNKNOWN
    started_at: float | None = None
    ended_at: float | None = None
    outcome: RowState | None = None
    error: TurnFailure | None = None
    # Set on a retry: why it ran (the previous execution's failure and the wait).
    retry_reason: str = ""

    @property
    def ended(self) -> bool:
        return self.outcome is not None


@dataclass(frozen=True)
class OperationRow:
    """One operation as the store holds it (one row per id, across incarnations).

    ``incarnation_id`` is the incarnation that wrote the row's current state.
    Times are unix seconds (floats); ``None`` when the step never happened.
    """

    operation_id: str
    state: RowState
    execution: Execution
    incarnation_id: str
    sequence: int
    fencing_token: int = 0
    attempt: int = 0
    kind: SlotKind | None = None
    envelope_digest: str = ""
    stop_reason: StopReason | None = None
    result: TurnOutput | None = None
    error: TurnFailure | None = None
    released: bool = False
    accepted_at: float | None = None
    started_at: float | None = None
    settled_at: float | None = None
    # The dispatch_stamp of the Dispatch that admitted (or took over) the row
    # (§6 witness); 0 for a tombstone.
    dispatch_stamp: int = 0
    # Settled by an execution: how many output chunks it emitted (R13).
    output_chunks: int = 0
    # Every execution of the executor for this row, oldest first (R15).
    executions: tuple[ExecutionRecord, ...] = ()

    @property
    def settled(self) -> bool:
        return self.state in SETTLED_STATES
