"""Failures map to exceptions named for the caller's next step (PROTOCOL.md §7)."""

from __future__ import annotations

import grpc
import pytest

from turnwire.client import (
    CheckCredentials,
    FixTheRequest,
    NoRunnerAvailable,
    NotFound,
    ReportABug,
    TurnwireError,
    UseANewIdempotencyKey,
)
from turnwire.common.v1 import errors_pb2

from .scripted import GET, SUBMIT, Scripted, fail_typed, fail_unary

pytestmark = pytest.mark.timeout(30)

E = errors_pb2
C = grpc.StatusCode

TYPED_CASES = [
    (C.FAILED_PRECONDITION, E.ERROR_REASON_IDEMPOTENCY_KEY_REUSED, UseANewIdempotencyKey),
    (C.INVALID_ARGUMENT, E.ERROR_REASON_TURN_INVALID, FixTheRequest),
    (C.INVALID_ARGUMENT, E.ERROR_REASON_IDEMPOTENCY_KEY_INVALID, FixTheRequest),
    (C.INVALID_ARGUMENT, E.ERROR_REASON_ARGUMENT_INVALID, FixTheRequest),
    (C.UNAUTHENTICATED, E.ERROR_REASON_CREDENTIALS_MISSING, CheckCredentials),
    (C.UNAUTHENTICATED, E.ERROR_REASON_CREDENTIALS_UNKNOWN, CheckCredentials),
    (C.FAILED_PRECONDITION, E.ERROR_REASON_NO_RUNNER_FOR_TURN, NoRunnerAvailable),
]


@pytest.mark.parametrize(("code", "reason", "expected"), TYPED_CASES)
def test_typed_refusals_map_to_their_exception_without_a_retry(
    code: grpc.StatusCode, reason: int, expected: type[TurnwireError]
) -> None:
    """§7: a typed refusal is final: one call, its exception, with code and reason kept."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.submit(items=["x"]))
    _, _, rpc = scripted.take_unary(SUBMIT)
    fail_typed(rpc, code, reason, "refused by the script")
    with pytest.raises(expected) as raised:
        call.result()
    assert raised.value.code is code
    assert raised.value.reason == errors_pb2.ErrorReason.Name(reason).removeprefix("ERROR_REASON_")
    assert raised.value.message == "refused by the script"
    assert scripted.pauses == []


def test_idempotency_key_reused_is_a_kind_of_fix_the_request() -> None:
    """The tree: UseANewIdempotencyKey is caught by `except FixTheRequest`."""
    assert issubclass(UseANewIdempotencyKey, FixTheRequest)


def test_unknown_operation_is_not_found() -> None:
    """§7: OPERATION_NOT_FOUND (also another principal's id) raises NotFound."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.get("op_nope"))
    _, request, rpc = scripted.take_unary(GET)
    fail_typed(rpc, C.NOT_FOUND, E.ERROR_REASON_OPERATION_NOT_FOUND, "no such operation")
    with pytest.raises(NotFound) as raised:
        call.result()
    assert request.operation_id == "op_nope"
    assert raised.value.reason == "OPERATION_NOT_FOUND"


def test_an_untyped_internal_error_is_a_bug_report_not_a_retry() -> None:
    """An untyped INTERNAL is outside the contract: ReportABug, never retried."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.get("op_1"))
    _, _, rpc = scripted.take_unary(GET)
    fail_unary(rpc, C.INTERNAL, "boom")
    with pytest.raises(ReportABug) as raised:
        call.result()
    assert raised.value.code is C.INTERNAL and raised.value.reason == ""
    assert scripted.pauses == []


def test_untyped_unauthenticated_still_says_check_credentials() -> None:
    """A status without ErrorInfo maps by its code (UNAUTHENTICATED -> CheckCredentials)."""
    scripted = Scripted()
    call = scripted.start(lambda client: client.get("op_1"))
    _, _, rpc = scripted.take_unary(GET)
    fail_unary(rpc, C.UNAUTHENTICATED, "who are you")
    with pytest.raises(CheckCredentials):
        call.result()
