"""The client's exceptions, and the one table that maps a gRPC failure to them.

The tree is drawn in the ``turnwire.client`` package docstring. Each class is
named for what the caller should do next; each carries the gRPC code and, when
the server sent one, the contract's ErrorInfo reason (``turnwire.errors``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import grpc

from turnwire.client.values import Operation
from turnwire.errors import error_info


class TurnwireError(Exception):
    """Base of every error the client raises.

    ``reason`` is the stable ErrorInfo reason string (``"OPERATION_NOT_FOUND"``)
    or ``""`` when the failure carried none (a transport failure).
    """

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata: Mapping[str, str] = MappingProxyType(dict(metadata or {}))
        # Seconds the server asked the caller to wait (google.rpc.RetryInfo).
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.message} ({self.reason})" if self.reason else self.message


class RetryLater(TurnwireError):
    """Transient: the coordinator was unreachable or its journal unavailable,
    or (reason ``QUOTA_EXCEEDED``) the principal is at one of its limits; then
    ``retry_after`` says how long to wait and ``metadata["limit"]`` which limit.

    Nothing is lost by retrying; for a submit, retry with the same
    idempotency key. ``resume_after`` is set when a watch gave up: pass it as
    ``after_sequence`` to resume without missing an event.
    """

    resume_after: int | None = None


class CheckConnectionSettings(TurnwireError):
    """This client's connection settings do not fit the coordinator; nothing was sent.

    A TLS handshake that failed (a CA that did not sign the coordinator's
    certificate, a TLS client against a plaintext coordinator, a certificate
    not valid for the address dialled), a plaintext client against a TLS
    coordinator, or a CA or token file that cannot be read. The message names
    the setting to fix (``ca_file=``, ``TURNWIRE_CA_FILE``, the CLI's
    ``--ca-file``). Never retried: the same settings fail the same way.
    """


class FixTheRequest(TurnwireError):
    """The request is malformed (a bad turn, key, argument or page token)."""


class UseANewIdempotencyKey(FixTheRequest):
    """This key was already used by you for a different turn; nothing changed."""


class CheckCredentials(TurnwireError):
    """The token is missing or maps to no principal."""


class NotFound(TurnwireError):
    """No such operation for this principal (another principal's id reads the same);
    from AdminService also ``RUNNER_NOT_FOUND`` (no member of the runner set has the name)."""


class NotAllowed(TurnwireError):
    """AdminService refused an act the operation's state does not allow
    (FAILED_PRECONDITION); nothing changed. ``reason`` names the rule:
    ``OPERATION_NOT_TERMINAL`` (wait for its end), ``OPERATION_NOT_AMBIGUOUS``
    (its execution is known: no verdict), ``VERDICT_CONFLICT`` (another verdict
    is recorded and final; ``metadata["recorded"]``, ``["by"]``),
    ``REQUEUE_NOT_ALLOWED`` (not proven NOT_STARTED and no NOT_EXECUTED verdict);
    for the runner set: ``RUNNER_CONFLICT`` (the name is a member with other
    fields: ``metadata["address"]``, ``["generation"]``), ``RUNNER_NOT_DRAINED``,
    ``RUNNER_HAS_TURNS`` (``metadata["turns"]``), ``RUNNER_CREDENTIALS_MISSING``.
    """


class NoRunnerAvailable(TurnwireError):
    """No configured runner serves the turn's pool and kind (NO_RUNNER_FOR_TURN), or
    none serves its executor (NO_RUNNER_FOR_EXECUTOR, PROTOCOL C6b)."""


class WaitLonger(TurnwireError):
    """``wait`` ran out of time; the operation is not terminal yet.

    ``operation`` is the latest state of it the call saw (None if none). From
    ``submit_and_wait`` that is usually the accepted one (QUEUED): it is sent
    no event between the acceptance and the terminal one. Nothing was cancelled.
    """

    def __init__(self, message: str, *, operation: Operation | None) -> None:
        super().__init__(message, code=grpc.StatusCode.DEADLINE_EXCEEDED)
        self.operation = operation


class ReportABug(TurnwireError):
    """An answer the contract does not allow (an untyped INTERNAL, an unknown code)."""


_BY_REASON: Mapping[str, type[TurnwireError]] = MappingProxyType(
    {
        "JOURNAL_UNAVAILABLE": RetryLater,
        "SHUTTING_DOWN": RetryLater,
        "QUOTA_EXCEEDED": RetryLater,
        "TURN_INVALID": FixTheRequest,
        "IDEMPOTENCY_KEY_INVALID": FixTheRequest,
        "ARGUMENT_INVALID": FixTheRequest,
        "PAGE_TOKEN_INVALID": FixTheRequest,
        "REQUEST_MALFORMED": FixTheRequest,
        "IDEMPOTENCY_KEY_REUSED": UseANewIdempotencyKey,
        "CREDENTIALS_MISSING": CheckCredentials,
        "CREDENTIALS_UNKNOWN": CheckCredentials,
        "OPERATION_NOT_FOUND": NotFound,
        "NO_RUNNER_FOR_TURN": NoRunnerAvailable,
        # No runner serves the turn's executor (PROTOCOL.md C6b).
        "NO_RUNNER_FOR_EXECUTOR": NoRunnerAvailable,
        # AdminService (PROTOCOL.md §10).
        "RUNNER_NOT_FOUND": NotFound,
        "OPERATION_NOT_TERMINAL": NotAllowed,
        "OPERATION_NOT_AMBIGUOUS": NotAllowed,
        "VERDICT_CONFLICT": NotAllowed,
        "REQUEUE_NOT_ALLOWED": NotAllowed,
        # The runner set (PROTOCOL.md §11).
        "RUNNER_CONFLICT": NotAllowed,
        "RUNNER_NOT_DRAINED": NotAllowed,
        "RUNNER_HAS_TURNS": NotAllowed,
        "RUNNER_CREDENTIALS_MISSING": NotAllowed,
    }
)

# Only when the reason is absent or unknown to this SDK.
_BY_CODE: Mapping[grpc.StatusCode, type[TurnwireError]] = MappingProxyType(
    {
        grpc.StatusCode.UNAVAILABLE: RetryLater,
        grpc.StatusCode.DEADLINE_EXCEEDED: RetryLater,
        grpc.StatusCode.RESOURCE_EXHAUSTED: RetryLater,
        grpc.StatusCode.INVALID_ARGUMENT: FixTheRequest,
        grpc.StatusCode.OUT_OF_RANGE: FixTheRequest,
        grpc.StatusCode.UNAUTHENTICATED: CheckCredentials,
        grpc.StatusCode.PERMISSION_DENIED: CheckCredentials,
        grpc.StatusCode.NOT_FOUND: NotFound,
    }
)

# Failures after which a request with the same content (and, for a submit, the
# same idempotency key) is safe to send again: nothing was decided, or the
# reply was lost and the server will answer the repeat from its journal.
_RETRYABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
# SHUTTING_DOWN: the coordinator is stopping and asks watchers to reconnect.
_RETRYABLE_REASONS = frozenset({"JOURNAL_UNAVAILABLE", "SHUTTING_DOWN"})


def status_code(error: grpc.RpcError) -> grpc.StatusCode:
    getter = getattr(error, "code", None)
    code = getter() if callable(getter) else None
    return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def status_details(error: grpc.RpcError) -> str:
    getter = getattr(error, "details", None)
    details = getter() if callable(getter) else None
    return details if isinstance(details, str) and details else "no details"


# gRPC reports a failed TLS handshake with the same code as an unreachable
# coordinator (UNAVAILABLE), but in its own words: "Tls handshake failed
# (TSI_PROTOCOL_FAILURE): ... CERTIFICATE_VERIFY_FAILED" (a CA that did not sign
# the server's certificate), "... WRONG_VERSION_NUMBER" (the server answered in
# plaintext), "Peer name X is not in peer certificate", "Failed to create
# security handshaker". A coordinator that is down or unreachable says
# "Connection refused", "Socket closed", "Deadline Exceeded"... instead, and
# stays RetryLater. (A plaintext client against a TLS coordinator also sees
# only "Socket closed": turnwire.client.plaintext_check tells that case apart.)
_HANDSHAKE_WORDS = ("Tls handshake failed", "Peer name", "security handshaker", "SSL_ERROR")
CA_OPTION = "--ca-file or TURNWIRE_CA_FILE (Python: ca_file=)"


def tls_misconfiguration(error: grpc.RpcError) -> CheckConnectionSettings | None:
    """The configuration error a failed TLS handshake means, or None for any other failure."""
    if status_code(error) is not grpc.StatusCode.UNAVAILABLE or error_info(error) is not None:
        return None
    details = status_details(error)
    if not any(words in details for words in _HANDSHAKE_WORDS):
        return None
    if "WRONG_VERSION_NUMBER" in details:
        advice = (
            "the coordinator does not speak TLS (it runs --plaintext): connect without a CA "
            f"(no {CA_OPTION})"
        )
    elif "CERTIFICATE_VERIFY_FAILED" in details:
        advice = (
            "the coordinator's certificate is not signed by the CA this client trusts: "
            f"give the CA that signed it with {CA_OPTION}"
        )
    elif "Peer name" in details:
        advice = (
            "the coordinator's certificate is not valid for the address dialled: dial a name "
            "it lists, or reissue it with `turnwire certs --host HOST`"
        )
    else:
        advice = f"check the CA given with {CA_OPTION}"
    return CheckConnectionSettings(
        f"TLS handshake with the coordinator failed: {advice} (gRPC: {details})",
        code=grpc.StatusCode.UNAVAILABLE,
    )


def is_retryable(error: grpc.RpcError) -> bool:
    """True when sending the same request again is safe and may succeed."""
    typed = error_info(error)
    if typed is not None:
        return typed.reason in _RETRYABLE_REASONS
    if tls_misconfiguration(error) is not None:
        return False  # the same settings fail the same way
    return status_code(error) in _RETRYABLE_CODES


def exception_for(error: grpc.RpcError, *, attempts: int = 1) -> TurnwireError:
    """The client exception for a failed call (the one mapping table)."""
    code = status_code(error)
    typed = error_info(error)
    if typed is not None:
        kind = _BY_REASON.get(typed.reason) or _BY_CODE.get(code, ReportABug)
        message = typed.message or status_details(error)
        return kind(
            message,
            code=code,
            reason=typed.reason,
            metadata=typed.metadata,
            retry_after=typed.retry_after,
        )
    misconfigured = tls_misconfiguration(error)
    if misconfigured is not None:
        return misconfigured
    kind = _BY_CODE.get(code, ReportABug)
    message = f"{code.name}: {status_details(error)}"
    if attempts > 1:
        message += f" (after {attempts} attempts)"
    return kind(message, code=code)
