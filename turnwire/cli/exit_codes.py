"""What the `turnwire` command's exit status means (shown in every --help)."""

from __future__ import annotations

import enum

from turnwire.client import (
    CheckConnectionSettings,
    CheckCredentials,
    FixTheRequest,
    NoRunnerAvailable,
    NotAllowed,
    NotFound,
    Operation,
    OperationState,
    RetryLater,
    TurnwireError,
    WaitLonger,
)


class ExitCode(enum.IntEnum):
    OK = 0
    UNEXPECTED = 1
    USAGE = 2
    TURN_DID_NOT_SUCCEED = 3
    OUTCOME_UNTRUSTWORTHY = 4
    CREDENTIALS = 5
    NOT_FOUND = 6
    UNAVAILABLE = 7
    NO_RUNNER = 8
    STILL_RUNNING = 9
    NOT_ALLOWED = 10
    CONFIGURATION = 11
    NOT_TERMINAL = 12
    CANCEL_TOO_LATE = 13
    INTERRUPTED = 130


EPILOG = """\
exit status:
  0    ok (with --exit-status or --wait: the turn SUCCEEDED; `cancel`: the
       cancel is requested, and with --wait it took effect: CANCELLED)
  1    unexpected error (an answer outside the contract: please report it)
  2    usage error: bad arguments, or the coordinator refused the request
       as malformed (TURN_INVALID, IDEMPOTENCY_KEY_INVALID/REUSED, ...)
  3    with --exit-status/--wait: the turn ended FAILED, CANCELLED or REJECTED
  4    with --exit-status/--wait: the turn ended TIMED_OUT or PROTOCOL_ERROR
       (ambiguous: check `execution` before you resubmit)
  5    credentials missing or unknown (--token, TURNWIRE_TOKEN)
  6    no such operation (for you)
  7    coordinator unavailable after retries: try again later
  8    no runner serves the turn's pool and kind, or its --executor
       (NO_RUNNER_FOR_EXECUTOR); nothing was stored
  9    --timeout passed while waiting: the turn is not finished yet
  10   `turnwire admin`: the operation's state does not allow it (not
       terminal, not ambiguous, another verdict recorded, not provably
       unexecuted); nothing changed
  11   connection misconfigured, nothing sent: TLS does not fit the
       coordinator (--ca-file or TURNWIRE_CA_FILE missing, not the CA that
       signed its certificate, or given to a plaintext coordinator), or a CA
       or token file cannot be read
  12   `get --exit-status/--result` (or a watch that ended before the end):
       the turn is not terminal yet
  13   `cancel`: too late, the turn ended first (SUCCEEDED, FAILED or
       REJECTED) and the cancel changed nothing
  130  interrupted (Ctrl-C); the turn itself is not cancelled
"""

_DID_NOT_SUCCEED = frozenset(
    {OperationState.FAILED, OperationState.CANCELLED, OperationState.REJECTED}
)
_UNTRUSTWORTHY = frozenset({OperationState.TIMED_OUT, OperationState.PROTOCOL_ERROR})


def for_outcome(operation: Operation) -> ExitCode:
    """The exit status for an operation's state (used by --exit-status and --wait)."""
    if operation.state is OperationState.SUCCEEDED:
        return ExitCode.OK
    if operation.state in _DID_NOT_SUCCEED:
        return ExitCode.TURN_DID_NOT_SUCCEED
    if operation.state in _UNTRUSTWORTHY:
        return ExitCode.OUTCOME_UNTRUSTWORTHY
    return ExitCode.NOT_TERMINAL


def for_cancel(operation: Operation) -> ExitCode:
    """The exit status of `turnwire cancel` for the operation it saw last: 0 while the
    cancel is pending or once it took effect (CANCELLED); 13 when the turn ended
    otherwise first (the cancel changed nothing); 4, as with --exit-status, when it
    ended ambiguous (TIMED_OUT, PROTOCOL_ERROR: check `execution`)."""
    if not operation.is_terminal or operation.state is OperationState.CANCELLED:
        return ExitCode.OK
    if operation.state in _UNTRUSTWORTHY:
        return ExitCode.OUTCOME_UNTRUSTWORTHY
    return ExitCode.CANCEL_TOO_LATE


_BY_ERROR: tuple[tuple[type[TurnwireError], ExitCode], ...] = (
    (CheckConnectionSettings, ExitCode.CONFIGURATION),
    (FixTheRequest, ExitCode.USAGE),
    (CheckCredentials, ExitCode.CREDENTIALS),
    (NotFound, ExitCode.NOT_FOUND),
    (RetryLater, ExitCode.UNAVAILABLE),
    (NoRunnerAvailable, ExitCode.NO_RUNNER),
    (WaitLonger, ExitCode.STILL_RUNNING),
    (NotAllowed, ExitCode.NOT_ALLOWED),
)


def for_error(error: TurnwireError) -> ExitCode:
    for kind, code in _BY_ERROR:
        if isinstance(error, kind):
            return code
    return ExitCode.UNEXPECTED
