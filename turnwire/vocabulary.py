"""The words both services use for the same wire concepts, defined once.

Each enum mirrors a proto enum by name without its prefix and without
``UNSPECIFIED`` (``ERROR_REASON_NO_FREE_SLOT`` -> ``ErrorReason.NO_FREE_SLOT``,
``EXECUTION_STARTED`` -> ``Execution.STARTED``): a zero value is never stored
or decided on. Values equal names, and these strings are what the journal
and the runner's store keep, so they are never renamed.

Plain ``StrEnum``s, free of the generated stubs and of protobuf, so each
service's pure ``core/`` may import them. A member compares equal to its
string (``ErrorReason.CANCELLED == "CANCELLED"``), so a reason read back
from storage as a plain ``str`` matches the member that wrote it.

``tests/contract/test_vocabulary.py`` holds each enum to its proto: a proto
value without a member here, or a member without a proto value, fails.
"""

from __future__ import annotations

import enum
import re

# The executor a turn that names none runs on (Turn.executor empty), and the
# shape of every executor name a runner serves or a turn names (PROTOCOL.md R14).
DEFAULT_EXECUTOR = "default"
EXECUTOR_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


def split_executor_flag(flag: str) -> tuple[str, str]:
    """``--executor NAME=SPEC`` -> (NAME, SPEC); a bare SPEC -> ("default", SPEC).
    Unambiguous: a spec's kind is a plain word, then ``:`` or nothing, so no spec
    starts with a name followed by ``=`` (``subprocess:env A=1 cmd`` is bare)."""
    head, sep, rest = flag.partition("=")
    if sep and EXECUTOR_NAME.fullmatch(head):
        return head, rest
    return DEFAULT_EXECUTOR, flag


class OperationState(enum.StrEnum):
    """coordinator.proto OperationState: where an operation is (PROTOCOL.md §2).

    Declared here once, with the terminal set below; the coordinator's core
    (``OpState``), the SDK (which adds ``UNSPECIFIED`` to read a newer server's
    values), the oracle and the demo take theirs from here.
    """

    QUEUED = "QUEUED"
    DISPATCHING = "DISPATCHING"
    DISPATCH_UNKNOWN = "DISPATCH_UNKNOWN"
    RUNNING = "RUNNING"
    CANCELLING = "CANCELLING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"
    PROTOCOL_ERROR = "PROTOCOL_ERROR"
    REJECTED = "REJECTED"

    @property
    def terminal(self) -> bool:
        """No outgoing edge: the state is final and written once (C10)."""
        return self in TERMINAL_STATES


# The states with no outgoing edge (C10). Members hash as their strings, so a
# state read back from storage as a plain str is found here too.
TERMINAL_STATES: frozenset[OperationState] = frozenset(
    {
        OperationState.SUCCEEDED,
        OperationState.FAILED,
        OperationState.CANCELLED,
        OperationState.TIMED_OUT,
        OperationState.PROTOCOL_ERROR,
        OperationState.REJECTED,
    }
)


class ErrorReason(enum.StrEnum):
    """The typed reasons of errors.proto: refusals, call errors, terminal reasons."""

    # Runner refusals (C6) and runner call errors.
    INCARNATION_MISMATCH = "INCARNATION_MISMATCH"
    NO_FREE_SLOT = "NO_FREE_SLOT"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    STORE_WRITE_FAILED = "STORE_WRITE_FAILED"
    ENVELOPE_MISMATCH = "ENVELOPE_MISMATCH"
    CANCELLED_BEFORE_DISPATCH = "CANCELLED_BEFORE_DISPATCH"
    STALE_FENCING_TOKEN = "STALE_FENCING_TOKEN"
    ENVELOPE_INVALID = "ENVELOPE_INVALID"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    EXECUTOR_UNAVAILABLE = "EXECUTOR_UNAVAILABLE"
    DISPATCH_STALE = "DISPATCH_STALE"
    OPERATION_PRUNED = "OPERATION_PRUNED"
    # Coordinator API errors.
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    IDEMPOTENCY_KEY_INVALID = "IDEMPOTENCY_KEY_INVALID"
    CREDENTIALS_MISSING = "CREDENTIALS_MISSING"
    CREDENTIALS_UNKNOWN = "CREDENTIALS_UNKNOWN"
    OPERATION_NOT_FOUND = "OPERATION_NOT_FOUND"
    TURN_INVALID = "TURN_INVALID"
    PAGE_TOKEN_INVALID = "PAGE_TOKEN_INVALID"
    JOURNAL_UNAVAILABLE = "JOURNAL_UNAVAILABLE"
    NO_RUNNER_FOR_TURN = "NO_RUNNER_FOR_TURN"
    ARGUMENT_INVALID = "ARGUMENT_INVALID"
    REQUEST_MALFORMED = "REQUEST_MALFORMED"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    # Reasons an operation ended (TurnError.reason, OperationEvent.reason).
    INCARNATION_CHANGED = "INCARNATION_CHANGED"
    RECONCILE_DEADLINE = "RECONCILE_DEADLINE"
    ACKNOWLEDGED_OPERATION_DISAPPEARED = "ACKNOWLEDGED_OPERATION_DISAPPEARED"
    MAX_ATTEMPTS_EXCEEDED = "MAX_ATTEMPTS_EXCEEDED"
    EXECUTOR_FAILED = "EXECUTOR_FAILED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    INTERRUPTED = "INTERRUPTED"
    RESULT_INVALID = "RESULT_INVALID"
    RUNNER_PROTOCOL_VIOLATION = "RUNNER_PROTOCOL_VIOLATION"
    CANCELLED = "CANCELLED"
    SHUTDOWN = "SHUTDOWN"
    DISPATCH_REJECTED = "DISPATCH_REJECTED"
    QUEUE_TIMEOUT = "QUEUE_TIMEOUT"
    CALLER_NOT_ALLOWED = "CALLER_NOT_ALLOWED"
    CREDENTIALS_EXPIRED = "CREDENTIALS_EXPIRED"
    SCOPE_MISSING = "SCOPE_MISSING"
    CONCURRENCY_LIMIT = "CONCURRENCY_LIMIT"
    # The operator's API (AdminService, PROTOCOL.md §10).
    OPERATION_NOT_AMBIGUOUS = "OPERATION_NOT_AMBIGUOUS"
    OPERATION_NOT_TERMINAL = "OPERATION_NOT_TERMINAL"
    VERDICT_CONFLICT = "VERDICT_CONFLICT"
    REQUEUE_NOT_ALLOWED = "REQUEUE_NOT_ALLOWED"
    RUNNER_NOT_FOUND = "RUNNER_NOT_FOUND"
    # Runner membership (PROTOCOL.md §11).
    RUNNER_REMOVED = "RUNNER_REMOVED"
    RUNNER_HAS_TURNS = "RUNNER_HAS_TURNS"
    RUNNER_NOT_DRAINED = "RUNNER_NOT_DRAINED"
    RUNNER_CONFLICT = "RUNNER_CONFLICT"
    RUNNER_CREDENTIALS_MISSING = "RUNNER_CREDENTIALS_MISSING"
    # Executors (PROTOCOL.md R12-R14).
    EXECUTOR_NOT_SERVED = "EXECUTOR_NOT_SERVED"
    HEARTBEAT_TIMEOUT = "HEARTBEAT_TIMEOUT"
    CHUNK_TOO_LARGE = "CHUNK_TOO_LARGE"
    STREAM_BUDGET_EXHAUSTED = "STREAM_BUDGET_EXHAUSTED"
    OUTPUT_UNAVAILABLE = "OUTPUT_UNAVAILABLE"
    NO_RUNNER_FOR_EXECUTOR = "NO_RUNNER_FOR_EXECUTOR"


class Execution(enum.StrEnum):
    """The billing truth (PROTOCOL.md §2): did an executor start? (turn.proto)"""

    NOT_STARTED = "NOT_STARTED"
    STARTED = "STARTED"
    UNKNOWN = "UNKNOWN"


class StopReason(enum.StrEnum):
    """Why a turn was asked to stop; the first one wins (R6). (turn.proto)"""

    CANCEL = "CANCEL"
    DEADLINE = "DEADLINE"
    BUDGET = "BUDGET"
    SHUTDOWN = "SHUTDOWN"
    HEARTBEAT = "HEARTBEAT"


class DeclaredEffect(enum.StrEnum):
    """What an executor declared about effects downstream of a failure (turn.proto).

    No member for UNSPECIFIED: an undeclared effect is stored and decided on
    as ``None`` (unknown), never as a value."""

    NONE = "NONE"
    APPLIED = "APPLIED"


class TurnKind(enum.StrEnum):
    """The slot pool a turn needs (R4); the runner calls it ``SlotKind``. (turn.proto)"""

    WRITABLE = "WRITABLE"
    READ_ONLY = "READ_ONLY"


class RunnerOperationState(enum.StrEnum):
    """What a runner's store says about one operation (runner.proto).

    ``INTERRUPTED`` is never stored: it is how a row an earlier incarnation
    left LAUNCHING or RUNNING is reported after a restart.
    """

    ACCEPTED = "ACCEPTED"
    LAUNCHING = "LAUNCHING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"
    INTERRUPTED = "INTERRUPTED"
    TOMBSTONED = "TOMBSTONED"
