"""Issue 11, the CI budget of the fuzzer: every RPC of TurnService and RunnerService.

The oracle is PROTOCOL §7 "Bad input" (every refusal typed, none INTERNAL) and R11
(nothing answered to a caller without credentials); afterwards R6/R7 (no slot held),
§8 item 1 (no execution twice) and a normal turn.

A real runner (metered executor, with a ledger) and a real coordinator that
dispatches to it, both in this process on 127.0.0.1. For every method of both
services Hypothesis draws requests from the descriptors (tests/security/rpc_fuzz.py:
typed, and raw bytes that do not decode or only just), mostly with valid
credentials and sometimes without, and ``classify`` must find no crash. Then:
every turn the fuzz started settles and frees its slot, nothing ran twice or
from nowhere (the ledger against the runner's store), and a normal turn still
goes through end to end.

How the event loop and Hypothesis meet: the servers are grpc.aio and need one
event loop; Hypothesis drives a synchronous test body. So the servers live on a
loop in a background thread for the whole module (started and stopped through
``asyncio.run_coroutine_threadsafe``) and each example calls them with
*synchronous* gRPC from the test thread: no coroutine ever crosses loops, each
``@given`` example is an ordinary function, and the very same ``rpc_fuzz.call``
serves the long run (tests/security/fuzz_long_run.py), whose servers are other processes.

Reproducible: ``derandomize=True`` (the seed comes from the test), no example
database. Budget: about 25 s on 2 cores (``EXAMPLES`` per method and path).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator_svc.api.auth import Scope
from coordinator_svc.app import RunningCoordinator
from runner_svc.app import RunningRunner
from tests.security import fuzz_hints, rpc_fuzz
from tests.security.fuzz_hints import Known, Target
from tests.security.rpc_fuzz import Method, Outcome, classify
from tests.support import runner_access
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2 as C
from turnwire.coordinator.v1 import coordinator_pb2_grpc
from turnwire.errors import TypedError
from turnwire.ledger import read_ledger
from turnwire.runner.v1 import runner_pb2 as R
from turnwire.runner.v1 import runner_pb2_grpc
from turnwire.testing.stack import Stack, StackThread
from turnwire.transport_security import SECRET_HEADER

EXAMPLES = 100  # per method and path: 13 methods x 2 paths
STREAM_TIMEOUT = 0.3
UNARY_TIMEOUT = 10.0

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@dataclass
class Servers:
    """A runner and a coordinator on turnwire.testing's Stack, served from its own thread."""

    served: StackThread
    runner: RunningRunner
    coordinator: RunningCoordinator
    ledger: Path
    token: str
    known: Known

    def alive(self) -> bool:
        return self.served.serving()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    stack = Stack(tmp_path_factory.mktemp("fuzz"), secret=runner_access.SECRET)
    with StackThread(stack) as served:
        token = stack.add_token("fuzz", scopes={Scope.ADMIN})
        runner = served.call(
            stack.start_runner(executor="metered", ledger_path=stack.ledger, drain_seconds=2.0)
        )
        coordinator = served.call(stack.start_coordinator())
        known = Known(incarnation_id=runner.incarnation_id)
        yield Servers(served, runner, coordinator, stack.ledger, token, known)


# --- the oracle can fail ------------------------------------------------------------------


def test_the_classifier_flags_an_untyped_or_internal_reply() -> None:
    path = "/turnwire.runner.v1.RunnerService/Dispatch"
    typed = TypedError(grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_MALFORMED", "bad bytes")
    internal = TypedError(grpc.StatusCode.INTERNAL, "X", "x")
    crashes = [
        Outcome(path, b"\x01", grpc.StatusCode.INTERNAL, "internal error"),
        Outcome(path, b"\x01", grpc.StatusCode.INTERNAL, "internal error", typed=internal),
        Outcome(path, b"\x01", grpc.StatusCode.UNKNOWN, "Exception calling application"),
        Outcome(path, b"", grpc.StatusCode.INVALID_ARGUMENT, "no ErrorInfo"),
        Outcome(path, b"", grpc.StatusCode.DEADLINE_EXCEEDED, "fast", elapsed=0.1, timeout=5),
        Outcome(path, b"", grpc.StatusCode.CANCELLED, "not by us"),
        Outcome(path, b"", grpc.StatusCode.UNAVAILABLE, "while serving"),
        Outcome(path, b"", grpc.StatusCode.OK, credentials="missing"),
        Outcome(path, b"", grpc.StatusCode.OK, undecodable_reply=True),
        Outcome(path, b"", grpc.StatusCode.OK, process_alive=False),
        Outcome(path, b"", grpc.StatusCode.NOT_FOUND, "Traceback (most recent call last):", typed),
    ]
    for outcome in crashes:
        assert classify(outcome) is not None, outcome
    fine = [
        Outcome(path, b"\xff", grpc.StatusCode.INVALID_ARGUMENT, "bad bytes", typed=typed),
        Outcome(path, b"", grpc.StatusCode.OK),
        Outcome(path, b"", grpc.StatusCode.DEADLINE_EXCEEDED, "ours", elapsed=0.3, timeout=0.3),
        Outcome(path, b"", grpc.StatusCode.CANCELLED, "ours", cancelled_by_us=True),
        Outcome(path, b"", grpc.StatusCode.UNAVAILABLE, "bye", shutting_down=True),
    ]
    for outcome in fine:
        assert classify(outcome) is None, outcome
    description = classify(crashes[0])
    assert description is not None and "INTERNAL" in description and "01" in description


def test_the_fuzz_covers_every_rpc_of_both_services() -> None:
    names = {m.name for m in rpc_fuzz.every_method(rpc_fuzz.TURN_SERVICE)}
    assert names == {m.name for m in rpc_fuzz.TURN_SERVICE.methods} and len(names) == 6
    runner = rpc_fuzz.every_method(rpc_fuzz.RUNNER_SERVICE)
    assert {m.name for m in runner} == {m.name for m in rpc_fuzz.RUNNER_SERVICE.methods}
    assert not any(m.client_streaming for m in runner)


# --- the fuzz -----------------------------------------------------------------------------


def _targets(servers: Servers) -> dict[str, tuple[Target, str]]:
    known = servers.known
    coordinator = Target(
        rpc_fuzz.TURN_SERVICE,
        valid=bearer(servers.token),
        wrong=bearer("tw_not-a-token"),
        hints=fuzz_hints.coordinator_hints(known),
    )
    runner = Target(
        rpc_fuzz.RUNNER_SERVICE,
        valid=runner_access.CREDENTIALS.call_metadata,
        wrong=((SECRET_HEADER, "a-wrong-secret-of-enough-length"),),
        hints=fuzz_hints.runner_hints(known),
    )
    return {
        "coordinator": (coordinator, servers.coordinator.address),
        "runner": (runner, servers.runner.address),
    }


CASES = [
    (service, method, raw)
    for service, descriptor in (
        ("coordinator", rpc_fuzz.TURN_SERVICE),
        ("runner", rpc_fuzz.RUNNER_SERVICE),
    )
    for method in rpc_fuzz.every_method(descriptor)
    for raw in (False, True)
]


@pytest.mark.parametrize(
    ("service", "method", "raw"),
    CASES,
    ids=[f"{s}-{m.name}-{'raw' if r else 'typed'}" for s, m, r in CASES],
)
def test_fuzz(servers: Servers, service: str, method: Method, raw: bool) -> None:
    """No request, typed or raw, with or without credentials, gets a crash back."""
    target, address = _targets(servers)[service]
    requests = fuzz_hints.calls_for(target, method, raw)
    timeout = STREAM_TIMEOUT if method.server_streaming else UNARY_TIMEOUT
    with grpc.insecure_channel(address) as channel:
        # A stream example may wait out its deadline: half as many keep the budget.
        examples = EXAMPLES // 2 if method.server_streaming else EXAMPLES

        @settings(FUZZ_SETTINGS, max_examples=examples)
        @given(data=st.data())
        def fuzz(data: st.DataObject) -> None:
            request = data.draw(requests, label="request")
            outcome = rpc_fuzz.call(
                channel, method, request.payload, request.metadata,
                credentials=request.credentials, timeout=timeout, alive=servers.alive,
            )  # fmt: skip
            servers.known.note(outcome, method)
            crash = classify(outcome)
            assert crash is None, crash

        fuzz()


# --- afterwards ---------------------------------------------------------------------------


def test_afterwards_every_turn_settled_nothing_ran_twice_and_a_normal_turn_succeeds(
    servers: Servers,
) -> None:
    """Runs after the fuzz (file order). Slots: all free once quiet (bounded wait: fuzzed
    Dispatches start real turns, up to MAX_SLEEP_MS each). Ledger: each execution's
    operation is known to the runner's store, none twice. Then SubmitTurn -> SUCCEEDED."""
    assert servers.alive()
    with runner_access.sync_channel(servers.runner.address) as channel:
        stub = runner_pb2_grpc.RunnerServiceStub(channel)
        deadline = time.monotonic() + 20
        while True:
            info = stub.GetRunnerInfo(R.GetRunnerInfoRequest(), timeout=5)
            busy = {turn_pb2.TurnKind.Name(p.kind): p.in_use for p in info.pools if p.in_use}
            if not busy or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert busy == {}, f"slots still held after 20 s: {busy}"
        assert info.held_result_not_saved == 0
        entries = read_ledger(servers.ledger) if servers.ledger.exists() else []
        ids = [entry.operation_id for entry in entries]
        assert len(ids) == len(set(ids)), "an operation executed twice"
        for op in set(ids):
            status = stub.GetOperationStatus(R.GetOperationStatusRequest(operation_id=op))
            assert status.present, f"execution of {op!r} appeared from nowhere"
    with grpc.insecure_channel(servers.coordinator.address) as channel:
        turns = coordinator_pb2_grpc.TurnServiceStub(channel)
        auth = bearer(servers.token)
        submitted = turns.SubmitTurn(fuzz_hints.normal_submit(), metadata=auth, timeout=10)
        op = submitted.operation.operation_id
        deadline = time.monotonic() + 30
        state = submitted.operation.state
        while state != C.OPERATION_STATE_SUCCEEDED and time.monotonic() < deadline:
            time.sleep(0.05)
            got = turns.GetOperation(C.GetOperationRequest(operation_id=op), metadata=auth)
            state = got.operation.state
        assert C.OperationState.Name(state) == "OPERATION_STATE_SUCCEEDED"
