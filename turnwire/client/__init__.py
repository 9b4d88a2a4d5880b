"""The Python client SDK for Turnwire's public API (PROTOCOL.md §7).

    from turnwire.client import TurnwireClient

    # TURNWIRE_ADDRESS, TURNWIRE_TOKEN (or TURNWIRE_TOKEN_FILE), TURNWIRE_CA_FILE:
    # the variables the `turnwire` command reads and `turnwire up` prints.
    with TurnwireClient.from_env() as client:
        submitted = client.submit(items=["hello"], model="builtin/echo",
                                  parameters={"sleep_ms": "500"})
        for event in client.watch(submitted.operation.operation_id):
            print(event.sequence, event.from_state, "->", event.to_state)
        final = client.get(submitted.operation.operation_id)
        # or both in one call (SubmitAndWatch), returning the terminal operation:
        final = client.submit_and_wait(items=["hello"], model="builtin/echo", timeout=60)
        # streamed partial output as it comes (PROTOCOL.md §12), then the operation:
        for item in client.submit_and_stream(items=["hello"], model="builtin/echo"):
            if isinstance(item, OutputChunk):
                print(item.text, end="", flush=True)

    # or explicitly (TLS trusting the CA that signed the coordinator's certificate;
    # without ca_file or credentials the connection is plaintext):
    client = TurnwireClient("127.0.0.1:50051", token="s3cret", ca_file="certs/ca.pem")

``from_env(address=..., token=..., token_file=..., ca_file=...)`` takes each
setting given, else its variable, else the default (127.0.0.1:50051, no token,
plaintext): ``turnwire.client.settings``. Every client class has it.

Every call is safe to repeat and is repeated after a transient failure
(UNAVAILABLE, DEADLINE_EXCEEDED, JOURNAL_UNAVAILABLE, SHUTTING_DOWN) with
exponential backoff and jitter, bounded in attempts and time. A submit always carries an
idempotency key (made for you when you pass none) and every retry carries the
same key, so a lost reply returns the same operation, never a second one.

Errors are named for what to do next; each carries ``code`` (the gRPC status
code) and ``reason`` (the contract's ErrorInfo reason, or "" when none came):

    TurnwireError
    ├── CheckConnectionSettings  TLS handshake failed (a CA that did not sign the
    │                          coordinator's certificate, TLS to a plaintext
    │                          coordinator), plaintext to a TLS coordinator, or a
    │                          CA or token file unreadable; names ca_file /
    │                          TURNWIRE_CA_FILE; never retried, nothing was sent
    ├── RetryLater             coordinator unreachable after the retries, or
    │                          JOURNAL_UNAVAILABLE / SHUTTING_DOWN after the
    │                          retries; a watch sets resume_after
    ├── FixTheRequest          TURN_INVALID, IDEMPOTENCY_KEY_INVALID,
    │   │                      ARGUMENT_INVALID, PAGE_TOKEN_INVALID,
    │   │                      REQUEST_MALFORMED
    │   └── UseANewIdempotencyKey   IDEMPOTENCY_KEY_REUSED (nothing changed)
    ├── CheckCredentials       CREDENTIALS_MISSING, CREDENTIALS_UNKNOWN
    ├── NotFound               OPERATION_NOT_FOUND (also another principal's id),
    │                          RUNNER_NOT_FOUND
    ├── NoRunnerAvailable      NO_RUNNER_FOR_TURN, NO_RUNNER_FOR_EXECUTOR
    ├── NotAllowed             AdminService: OPERATION_NOT_TERMINAL,
    │                          OPERATION_NOT_AMBIGUOUS, VERDICT_CONFLICT,
    │                          REQUEUE_NOT_ALLOWED, RUNNER_CONFLICT,
    │                          RUNNER_NOT_DRAINED, RUNNER_HAS_TURNS,
    │                          RUNNER_CREDENTIALS_MISSING (nothing changed)
    ├── WaitLonger             wait() timed out; .operation is the latest state
    └── ReportABug             an answer the contract does not allow

The operator's calls (AdminService: every principal's operations, ambiguous
turns with their evidence, verdicts, requeue, runners: add, drain, remove) are
``AdminClient`` / ``AsyncAdminClient`` (``turnwire.client.admin``); they need
a token with the ``admin`` scope.
"""

from turnwire.client.admin import AdminClient, AsyncAdminClient
from turnwire.client.admin_values import (
    AdminOperation,
    AdminOperationPage,
    Attempt,
    AttemptOutcome,
    EvidencePage,
    MembershipAction,
    MembershipRecord,
    OperationEvidence,
    Requeued,
    Runner,
    RunnerChanged,
    RunnerRemoved,
    VerdictRecorded,
)
from turnwire.client.aio import AsyncTurnwireClient
from turnwire.client.executions import ExecutionOutcome, ExecutionRecord, TurnRetry
from turnwire.client.failures import (
    CheckConnectionSettings,
    CheckCredentials,
    FixTheRequest,
    NoRunnerAvailable,
    NotAllowed,
    NotFound,
    ReportABug,
    RetryLater,
    TurnwireError,
    UseANewIdempotencyKey,
    WaitLonger,
)
from turnwire.client.retrying import NO_RETRY, RetryPolicy
from turnwire.client.settings import ConnectionSettings
from turnwire.client.streaming import OutputChunk, OutputGap, StreamItem
from turnwire.client.sync import TurnwireClient, new_idempotency_key
from turnwire.client.turns import FileRef, InputItem, ModelRef, Turn, TurnFields
from turnwire.client.values import (
    Execution,
    Operation,
    OperationEvent,
    OperationPage,
    OperationState,
    OperatorVerdict,
    ReplayPolicy,
    StopReason,
    Submission,
    TurnError,
    TurnKind,
    TurnResult,
    Verdict,
)

__all__ = [
    "NO_RETRY",
    "AdminClient",
    "AdminOperation",
    "AdminOperationPage",
    "AsyncAdminClient",
    "AsyncTurnwireClient",
    "Attempt",
    "AttemptOutcome",
    "CheckConnectionSettings",
    "CheckCredentials",
    "ConnectionSettings",
    "EvidencePage",
    "Execution",
    "ExecutionOutcome",
    "ExecutionRecord",
    "FileRef",
    "FixTheRequest",
    "InputItem",
    "MembershipAction",
    "MembershipRecord",
    "ModelRef",
    "NoRunnerAvailable",
    "NotAllowed",
    "NotFound",
    "Operation",
    "OperationEvent",
    "OperationEvidence",
    "OperationPage",
    "OperationState",
    "OperatorVerdict",
    "OutputChunk",
    "OutputGap",
    "ReplayPolicy",
    "ReportABug",
    "Requeued",
    "RetryLater",
    "RetryPolicy",
    "Runner",
    "RunnerChanged",
    "RunnerRemoved",
    "StopReason",
    "StreamItem",
    "Submission",
    "Turn",
    "TurnError",
    "TurnFields",
    "TurnKind",
    "TurnResult",
    "TurnRetry",
    "TurnwireClient",
    "TurnwireError",
    "UseANewIdempotencyKey",
    "Verdict",
    "VerdictRecorded",
    "WaitLonger",
    "new_idempotency_key",
]
