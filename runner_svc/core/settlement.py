"""Stop reasons (R6), launch checks (R3), settlement (R7) and restart reports (§6).

All pure: the shell passes in the facts (the row, the first stop reason, the
executor's outcome as plain values, the time) and performs what comes back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from runner_svc.core.model import (
    DeclaredEffect,
    Execution,
    OperationRow,
    RowState,
    StopReason,
    TurnFailure,
    TurnOutput,
)

# Bigger results would not fit a default gRPC message with room to spare.
MAX_OUTPUT_BYTES = 3 * 1024 * 1024

# The terminal state and errors.proto reason a stop reason leads to when the
# executor did not finish on its own.
STOP_OUTCOMES: dict[StopReason, tuple[RowState, str]] = {
    StopReason.CANCEL: (RowState.CANCELLED, "CANCELLED"),
    StopReason.DEADLINE: (RowState.TIMED_OUT, "DEADLINE_EXCEEDED"),
    StopReason.BUDGET: (RowState.TIMED_OUT, "BUDGET_EXHAUSTED"),
    StopReason.SHUTDOWN: (RowState.CANCELLED, "SHUTDOWN"),
    StopReason.HEARTBEAT: (RowState.TIMED_OUT, "HEARTBEAT_TIMEOUT"),
}


def first_stop_reason(current: StopReason | None, new: StopReason) -> StopReason:
    """R6: the first reason is kept; later ones never overwrite it."""
    return current if current is not None else new


@dataclass(frozen=True)
class ReportedOutcome:
    """An executor's outcome as plain values (the shell copies it off the port)."""

    succeeded: object
    output: object = b""
    content_type: object = ""
    error_reason: object = ""
    error_message: object = ""
    metadata: object = field(default_factory=dict)
    # A failure's declared effect downstream: "" (undeclared), "NONE" or "APPLIED".
    effect: object = ""
    # With effect NONE: seconds until a retry may help (None: no hint).
    retry_after: object = None


@dataclass(frozen=True)
class SettlementDecision:
    state: RowState
    result: TurnOutput | None = None
    error: TurnFailure | None = None


def validate_outcome(outcome: ReportedOutcome, known_reasons: frozenset[str]) -> str | None:
    """Why the outcome is unusable, or None when it is well-formed (R7)."""
    if not isinstance(outcome.succeeded, bool):
        return "succeeded is not a bool"
    if not isinstance(outcome.output, bytes) or len(outcome.output) > MAX_OUTPUT_BYTES:
        return f"output must be bytes of at most {MAX_OUTPUT_BYTES}"
    texts = (outcome.content_type, outcome.error_reason, outcome.error_message)
    if not all(isinstance(text, str) for text in texts):
        return "content_type, error_reason and error_message must be str"
    metadata = outcome.metadata
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        return "metadata must map str to str"
    if outcome.error_reason and outcome.error_reason not in known_reasons:
        return f"unknown error reason {outcome.error_reason!r}"
    return _effect_problem(outcome)


def _effect_problem(outcome: ReportedOutcome) -> str | None:
    if outcome.effect not in ("", *DeclaredEffect):
        return f"unknown declared effect {outcome.effect!r}"
    if outcome.effect and outcome.succeeded:
        return "a success declares no effect"
    retry_after = outcome.retry_after
    if retry_after is None:
        return None
    if outcome.effect != DeclaredEffect.NONE:
        return "retry_after goes only with the declared effect NONE"
    if not isinstance(retry_after, int | float) or not 0 <= retry_after <= _MAX_RETRY_AFTER:
        return f"retry_after must be 0..{_MAX_RETRY_AFTER} seconds"
    return None


# A day: a provider's Retry-After beyond it is not a hint a retry policy uses.
_MAX_RETRY_AFTER = 86400.0


def decide_settlement(
    stop_reason: StopReason | None, outcome: ReportedOutcome, known_reasons: frozenset[str]
) -> SettlementDecision:
    """R7: the terminal state from the first stop reason and the validated outcome.

    A turn that succeeded stays SUCCEEDED even if a stop was asked for: it
    finished first (C11). A failure after a stop request is the stop's doing.
    """
    problem = validate_outcome(outcome, known_reasons)
    if problem is not None:
        return SettlementDecision(RowState.FAILED, error=TurnFailure("RESULT_INVALID", problem))
    if outcome.succeeded:
        return SettlementDecision(RowState.SUCCEEDED, result=_output(outcome))
    # What the executor declared about effects downstream is kept whatever
    # ended the turn: it is the billing truth's detail (a retry policy reads it).
    effect = DeclaredEffect(str(outcome.effect)) if outcome.effect else None
    retry_after = (
        float(outcome.retry_after) if isinstance(outcome.retry_after, int | float) else None
    )
    if stop_reason is not None:
        state, reason = STOP_OUTCOMES[stop_reason]
        failure = TurnFailure(reason, f"stopped: {stop_reason}", effect, retry_after)
        return SettlementDecision(state, error=failure)
    reason = str(outcome.error_reason) or "EXECUTOR_FAILED"
    failure = TurnFailure(reason, str(outcome.error_message), effect, retry_after)
    return SettlementDecision(RowState.FAILED, error=failure)


def _output(outcome: ReportedOutcome) -> TurnOutput:
    assert isinstance(outcome.output, bytes) and isinstance(outcome.metadata, Mapping)
    return TurnOutput(
        output=outcome.output,
        content_type=str(outcome.content_type),
        metadata=dict(outcome.metadata),
    )


def unlaunched_settlement(stop_reason: StopReason) -> SettlementDecision:
    """A row stopped before its launch intent: it provably never started."""
    state, reason = STOP_OUTCOMES[stop_reason]
    return SettlementDecision(
        state, error=TurnFailure(reason, f"stopped before launch: {stop_reason}")
    )


def due_stop_reason(
    *,
    now: float,
    deadline: float | None,
    started_at: float | None,
    budget_seconds: float | None,
    heartbeat_due: float | None = None,
) -> StopReason | None:
    """Which limit has run out at ``now`` (deadline first: it is wall-clock truth;
    then the budget; then the heartbeat, due by ``heartbeat_due``, R12)."""
    if deadline is not None and now >= deadline:
        return StopReason.DEADLINE
    if budget_seconds is not None and started_at is not None and now >= started_at + budget_seconds:
        return StopReason.BUDGET
    if heartbeat_due is not None and now >= heartbeat_due:
        return StopReason.HEARTBEAT
    return None


def heartbeat_due(
    started_at: float | None, last_heartbeat: float | None, timeout: float | None
) -> float | None:
    """When the executor's next heartbeat is due (R12): a timeout after its start
    or its last heartbeat, whichever is later; None when none is required."""
    if timeout is None or started_at is None:
        return None
    seen = started_at if last_heartbeat is None else max(started_at, last_heartbeat)
    return seen + timeout


def launch_block(
    row: OperationRow | None, incarnation_id: str, stop_reason: StopReason | None
) -> str:
    """Why the launch must not happen ("" when it may): R3's launch check."""
    if row is None:
        return "the row is gone"
    if row.state is not RowState.ACCEPTED:
        return f"the row is {row.state.value}, not ACCEPTED"
    if row.incarnation_id != incarnation_id:
        return "the row belongs to another incarnation"
    if stop_reason is not None or row.stop_reason is not None:
        return f"stop reason {stop_reason or row.stop_reason} came first"
    return ""


def reported_row(row: OperationRow, incarnation_id: str) -> OperationRow:
    """What a status reply says about a stored row (R3, §6).

    A row an earlier incarnation left LAUNCHING or RUNNING can no longer
    settle: it is reported INTERRUPTED, with execution UNKNOWN (intent only)
    or STARTED (confirmed). The row keeps the incarnation that wrote it.
    """
    if row.incarnation_id == incarnation_id or row.state not in (
        RowState.LAUNCHING,
        RowState.RUNNING,
    ):
        return row
    execution = Execution.STARTED if row.state is RowState.RUNNING else Execution.UNKNOWN
    return replace(
        row,
        state=RowState.INTERRUPTED,
        execution=execution,
        error=TurnFailure("INTERRUPTED", "the runner process ended while this turn was in flight"),
    )
