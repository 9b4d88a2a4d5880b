"""Decisions shared by the sync and asyncio watch loops (pure; no I/O).

A watch reopens a dropped stream from the last sequence it delivered, so the
caller sees every transition once. These functions decide, after a failure,
whether to reopen and after what pause, or what to raise.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from turnwire.client.failures import (
    ReportABug,
    RetryLater,
    TurnwireError,
    WaitLonger,
    exception_for,
    is_retryable,
)
from turnwire.client.retrying import RetryBudget
from turnwire.client.values import Operation


def reopen_pause(
    error: grpc.RpcError,
    budget: RetryBudget,
    *,
    deadline_passed: bool,
    operation_id: str,
    cursor: int,
) -> float:
    """The pause before reopening the stream; raises when it must not be reopened."""
    if deadline_passed:
        raise WaitLonger(f"{operation_id} is not terminal yet", operation=None)
    pause = budget.next_pause() if is_retryable(error) else None
    if pause is None:
        failure: TurnwireError = exception_for(error, attempts=budget.attempts)
        if isinstance(failure, RetryLater):
            failure.resume_after = cursor
        raise failure from None
    return pause


def stream_timeout(
    deadline: float | None, clock: Callable[[], float], operation_id: str
) -> float | None:
    """The deadline of the next stream, or WaitLonger when none is left."""
    if deadline is None:
        return None
    remaining = deadline - clock()
    if remaining <= 0:
        raise WaitLonger(f"{operation_id} is not terminal yet", operation=None)
    return remaining


def remaining(deadline: float | None, clock: Callable[[], float]) -> float | None:
    """Seconds left before ``deadline`` (None: no deadline)."""
    return None if deadline is None else deadline - clock()


def ended_early(operation_id: str, latest: Operation) -> WaitLonger:
    """A stream that ended OK before the terminal event, the operation still not terminal."""
    return WaitLonger(
        f"{operation_id} is still {latest.state}: the watch ended early", operation=latest
    )


def submission_label(idempotency_key: str) -> str:
    """How errors name a submitted turn before its first event names the operation."""
    return f"the turn submitted with idempotency key {idempotency_key!r}"


def is_unimplemented(error: TurnwireError) -> bool:
    """The coordinator does not know the method (older than it): nothing was done."""
    return error.code is grpc.StatusCode.UNIMPLEMENTED


def no_operation(label: str) -> ReportABug:
    """SubmitAndWatch ended without a single event: the contract sends QUEUED first."""
    return ReportABug(f"{label}: the stream ended without naming its operation")
