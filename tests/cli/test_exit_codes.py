"""Exit statuses mean something (documented in every --help epilog)."""

from __future__ import annotations

import grpc
import pytest

from turnwire.cli import describe_error
from turnwire.cli.commands import Hinted, limited
from turnwire.cli.exit_codes import EPILOG, ExitCode, for_cancel, for_error, for_outcome
from turnwire.client import (
    CheckConnectionSettings,
    CheckCredentials,
    Execution,
    FixTheRequest,
    NoRunnerAvailable,
    NotFound,
    Operation,
    OperationPage,
    OperationState,
    ReportABug,
    RetryLater,
    TurnwireError,
    UseANewIdempotencyKey,
    WaitLonger,
)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (OperationState.SUCCEEDED, 0),
        (OperationState.FAILED, 3),
        (OperationState.CANCELLED, 3),
        (OperationState.REJECTED, 3),
        (OperationState.TIMED_OUT, 4),
        (OperationState.PROTOCOL_ERROR, 4),
        (OperationState.QUEUED, 12),
        (OperationState.RUNNING, 12),
        (OperationState.DISPATCH_UNKNOWN, 12),
    ],
)
def test_outcome_exit_status(state: OperationState, expected: int) -> None:
    """--exit-status: 0 SUCCEEDED, 3 did not succeed, 4 ambiguous, 12 not terminal
    (its own code: 9 means only that --timeout passed while waiting)."""
    op = Operation(operation_id="op_1", state=state, execution=Execution.UNKNOWN)
    assert for_outcome(op) == expected


@pytest.mark.parametrize(
    ("state", "cancel_requested", "expected"),
    [
        (OperationState.CANCELLED, True, 0),
        (OperationState.RUNNING, True, 0),
        (OperationState.CANCELLING, True, 0),
        (OperationState.SUCCEEDED, True, 13),
        (OperationState.FAILED, True, 13),
        (OperationState.REJECTED, False, 13),
        (OperationState.TIMED_OUT, True, 4),
        (OperationState.PROTOCOL_ERROR, True, 4),
    ],
)
def test_cancel_exit_status(state: OperationState, cancel_requested: bool, expected: int) -> None:
    """cancel: 0 pending or took effect (CANCELLED), 13 the turn ended otherwise first,
    4 it ended ambiguous (as --exit-status says: check execution)."""
    op = Operation(
        operation_id="op_1",
        state=state,
        execution=Execution.STARTED,
        cancel_requested=cancel_requested,
    )
    assert for_cancel(op) == expected


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (FixTheRequest("bad turn", reason="TURN_INVALID"), 2),
        (UseANewIdempotencyKey("reused", reason="IDEMPOTENCY_KEY_REUSED"), 2),
        (CheckCredentials("who", reason="CREDENTIALS_UNKNOWN"), 5),
        (NotFound("none", reason="OPERATION_NOT_FOUND"), 6),
        (RetryLater("down", code=grpc.StatusCode.UNAVAILABLE), 7),
        (NoRunnerAvailable("no runner", reason="NO_RUNNER_FOR_TURN"), 8),
        (CheckConnectionSettings("tls", code=grpc.StatusCode.UNAVAILABLE), 11),
        (WaitLonger("later", operation=None), 9),
        (ReportABug("odd", code=grpc.StatusCode.INTERNAL), 1),
    ],
)
def test_error_exit_status(error: TurnwireError, expected: int) -> None:
    """Each client error has its documented exit status."""
    assert for_error(error) == expected


def test_every_exit_status_is_documented() -> None:
    """The --help epilog lists every ExitCode value."""
    for code in ExitCode:
        assert f"\n  {int(code):<4} " in "\n" + EPILOG


def test_error_line_is_one_line_with_reason_and_hint() -> None:
    """stderr gets one line: advice, message, reason, and the hint (the key to reuse)."""
    error = Hinted(RetryLater("UNAVAILABLE: gone"), "resubmit with --idempotency-key k-1")
    message, code = describe_error(error)
    assert code is ExitCode.UNAVAILABLE
    assert "\n" not in message and "k-1" in message and "try again later" in message
    message, _ = describe_error(NotFound("no such operation", reason="OPERATION_NOT_FOUND"))
    assert message == "not found: no such operation (OPERATION_NOT_FOUND)"


def test_list_limit_stops_across_pages() -> None:
    """list --limit N takes N across pages and says whether more exist."""

    def page(*ids: str, token: str = "") -> OperationPage:
        ops = tuple(Operation(i, OperationState.QUEUED, Execution.NOT_STARTED) for i in ids)
        return OperationPage(ops, token)

    taken, more = limited(iter([page("a", "b", token="t"), page("c")]), 2)
    assert [op.operation_id for op in taken] == ["a", "b"] and more
    taken, more = limited(iter([page("a", "b", token="t"), page("c")]), 0)
    assert [op.operation_id for op in taken] == ["a", "b", "c"] and not more
