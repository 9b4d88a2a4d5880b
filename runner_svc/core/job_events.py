"""What the job lifecycle machine hears and what it asks (core/job_lifecycle.py).

Events say what happened to a job; commands say what the shell
(``runner_svc.jobs``) must do next. Plain frozen values, no behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner_svc.core.model import Execution, OperationRow, StopReason, TurnFailure
from runner_svc.core.settlement import ReportedOutcome, SettlementDecision

# --- events: what happened ------------------------------------------------------------


@dataclass(frozen=True)
class LaunchChecked:
    """The row as read under the operation's lock just before launching (R3)."""

    row: OperationRow | None
    now: float


@dataclass(frozen=True)
class LaunchCheckFailed:
    """The store could not be read for the launch check."""


@dataclass(frozen=True)
class StartDue:
    """The run of a job admitted with its launch intent begins (R3, R4), under the
    operation's lock, at ``now``: its executor's start is next."""

    now: float


@dataclass(frozen=True)
class LaunchIntentWritten:
    """The launch intent is durable (answers WriteLaunchIntent)."""


@dataclass(frozen=True)
class LaunchIntentFailed:
    """The launch intent was not saved (answers WriteLaunchIntent)."""


@dataclass(frozen=True)
class ExecutorStartFailed:
    """The executor did not start (answers StartExecutor). Only a typed refusal
    proves nothing started; any other failure may have started it."""

    detail: str
    may_have_started: bool


@dataclass(frozen=True)
class LimitTimerFired:
    """The timer armed by ArmLimitTimer woke at ``now``; ``last_heartbeat``: when the
    executor last gave a sign of life (a heartbeat, a chunk, a frame), if ever (R12)."""

    now: float
    last_heartbeat: float | None = None


@dataclass(frozen=True)
class ExecutorFinished:
    """The executor's outcome as plain values, and the error reasons it may name.
    ``now``: when it finished; a retry (R15) is timed from it, and without it
    none is made."""

    outcome: ReportedOutcome
    known_reasons: frozenset[str]
    now: float | None = None


@dataclass(frozen=True)
class ExecutionEndWritten:
    """A retryable execution's end is durable (answers WriteExecutionEnd, R15)."""


@dataclass(frozen=True)
class ExecutionEndFailed:
    """A retryable execution's end was not saved (answers WriteExecutionEnd)."""


@dataclass(frozen=True)
class RetryTimerFired:
    """The wait armed by ArmRetryTimer is over (R15)."""

    now: float


@dataclass(frozen=True)
class ExecutorStarted:
    """The executor has really started (answers StartExecutor). ``finished``: its
    outcome, when it was already in hand as the start returned (an executor
    whose work needed no wait), so no start confirmation is due on its own."""

    at: float
    finished: ExecutorFinished | None = None


@dataclass(frozen=True)
class SettlementWritten:
    """The settlement is durable (answers WriteSettlement)."""


@dataclass(frozen=True)
class SettlementWriteFailed:
    """The settlement was not saved (answers WriteSettlement)."""


@dataclass(frozen=True)
class CancelRequested:
    """A Cancel for this operation, with its row as read under the operation's lock."""

    row: OperationRow


@dataclass(frozen=True)
class DrainStarted:
    """The runner began to drain (R8): SHUTDOWN is recorded where no reason exists."""


@dataclass(frozen=True)
class DrainDeadlinePassed:
    """The drain waited long enough: running executors are asked to stop."""


@dataclass(frozen=True)
class JobCrashed:
    """The job's run failed unexpectedly: fail closed, the slot stays held."""


@dataclass(frozen=True)
class JobAbandoned:
    """Shutdown gave up on the job's run (it will read INTERRUPTED after restart)."""


JobEvent = (
    LaunchChecked
    | LaunchCheckFailed
    | StartDue
    | LaunchIntentWritten
    | LaunchIntentFailed
    | ExecutorStarted
    | ExecutorStartFailed
    | LimitTimerFired
    | ExecutorFinished
    | ExecutionEndWritten
    | ExecutionEndFailed
    | RetryTimerFired
    | SettlementWritten
    | SettlementWriteFailed
    | CancelRequested
    | DrainStarted
    | DrainDeadlinePassed
    | JobCrashed
    | JobAbandoned
)


# --- commands: what the shell does --------------------------------------------------


@dataclass(frozen=True)
class NoteNotLaunched:
    """Log why the launch check blocked the launch."""

    why: str


@dataclass(frozen=True)
class WriteLaunchIntent:
    """Write the launch intent (R3) of execution ``number``: the row's own for the
    first, a retry's (R15) for a later one, with ``reason`` saying why it runs.
    Answer: LaunchIntentWritten or LaunchIntentFailed."""

    number: int = 1
    reason: str = ""


@dataclass(frozen=True)
class WriteExecutionEnd:
    """Write that the current execution failed with declared effect NONE and a
    retry may follow (R15); the row stays unsettled. Answer: ExecutionEndWritten
    or ExecutionEndFailed."""

    error: TurnFailure
    started_at: float | None


@dataclass(frozen=True)
class ArmRetryTimer:
    """Wake the job at ``at`` (RetryTimerFired) to start its next execution (R15)."""

    at: float


@dataclass(frozen=True)
class StartExecutor:
    """Start the executor. Answer: ExecutorStarted or ExecutorStartFailed."""


@dataclass(frozen=True)
class RecordProcessGroup:
    """Write down the executor's process group, if it has one (R10)."""

    started_at: float


@dataclass(frozen=True)
class WriteConfirmStart:
    """Queue the start confirmation (R3) behind the store's writer; the job does not
    wait for it. Unsaved, the row says UNKNOWN: still true."""

    started_at: float


@dataclass(frozen=True)
class WithdrawConfirmStart:
    """The outcome is in: if the queued start confirmation has not been taken up by
    the store's writer yet, drop it. The settlement, written next on the same
    writer, records the start itself (R3); one already taken lands before it."""


@dataclass(frozen=True)
class WriteStopReason:
    """Write the first stop reason (R6). Unsaved, it is kept in memory only."""

    reason: StopReason


@dataclass(frozen=True)
class StopExecutor:
    """Ask the running executor to stop (it then finishes; the slot waits for that)."""


@dataclass(frozen=True)
class ArmLimitTimer:
    """Wake the job at ``at`` (LimitTimerFired) to check its deadline, budget and
    heartbeat (R6, R12)."""

    at: float


@dataclass(frozen=True)
class WriteSettlement:
    """Write the terminal state once (R7). Answer: SettlementWritten or SettlementWriteFailed."""

    decision: SettlementDecision
    execution: Execution
    # When the executor started (execution STARTED): the row records it even if
    # no start confirmation landed before the settlement (R3).
    started_at: float | None = None
    # The current execution's own start truth when it differs from ``execution``
    # (R15: a retry whose start was refused after an earlier execution ran).
    current_execution: Execution | None = None


@dataclass(frozen=True)
class FreeSlot:
    """Give the job's slot back to its pool and forget the job."""


Command = (
    NoteNotLaunched
    | WriteLaunchIntent
    | WriteExecutionEnd
    | ArmRetryTimer
    | StartExecutor
    | RecordProcessGroup
    | WriteConfirmStart
    | WithdrawConfirmStart
    | WriteStopReason
    | StopExecutor
    | ArmLimitTimer
    | WriteSettlement
    | FreeSlot
)
