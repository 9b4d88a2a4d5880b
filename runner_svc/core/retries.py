"""R15's rule as the job machine asks it: is this failed execution retried, and when?

Pure: the machine passes in the settlement it decided (R7), the first stop
reason, the turn's policy and limits, and the time; nothing here reads a
clock. The policy's arithmetic (bounds, backoff) is ``turnwire.retry_policy``.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner_svc.core.model import (
    DeclaredEffect,
    ExecutionRecord,
    RowState,
    StopReason,
    TurnFailure,
)
from runner_svc.core.settlement import STOP_OUTCOMES, SettlementDecision
from turnwire.retry_policy import RetryRule, retry_wait


def retryable(error: TurnFailure | None) -> bool:
    """R15's one test of a failure: only what the executor declared had no effect
    downstream (NONE) may run again. The job machine asks it before waiting, the
    row table before an execution's end and a retry's intent."""
    return error is not None and error.effect is DeclaredEffect.NONE


def may_follow(previous: ExecutionRecord | None) -> bool:
    """R15: a next execution only after the previous one ended (never two at once)
    with a retryable failure."""
    return previous is not None and previous.ended and retryable(previous.error)


@dataclass(frozen=True)
class Retry:
    """The next execution may start at ``at``; ``reason`` says why it runs."""

    at: float
    reason: str


def retry_after_failure(
    policy: RetryRule | None,
    decision: SettlementDecision,
    *,
    stop_reason: StopReason | None,
    ended_execution: int,
    now: float | None,
    deadline: float | None,
    budget_ends: float | None,
) -> Retry | None:
    """R15: a retry only after a FAILED execution whose executor declared effect
    NONE, that nothing stopped, with a retry left and the wait ending before the
    deadline and the budget. Anything else (APPLIED, undeclared, a malformed
    outcome, a timeout, a stop, a success) is final: None."""
    error = decision.error
    if (
        policy is None
        or now is None
        or stop_reason is not None
        or decision.state is not RowState.FAILED
        or error is None
        or not retryable(error)
    ):
        return None
    at = retry_wait(
        policy,
        ended_execution=ended_execution,
        retry_after=error.retry_after,
        now=now,
        deadline=deadline,
        budget_ends=budget_ends,
    )
    if at is None:
        return None
    reason = (
        f"execution {ended_execution} failed {error.reason}, effect NONE; waited {at - now:.3g} s"
    )
    return Retry(at, reason)


def stopped_in_backoff(reason: StopReason) -> SettlementDecision:
    """R15: a stop during the wait ends the turn with that stop (R6's outcome for
    it); no execution is running, so none is asked to stop and none follows."""
    state, error_reason = STOP_OUTCOMES[reason]
    failure = TurnFailure(error_reason, f"stopped during the retry wait: {reason}")
    return SettlementDecision(state, error=failure)
