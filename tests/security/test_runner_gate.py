"""Issue 11, PROTOCOL R11: a runner serves only its coordinator, on every RPC of its port.

A real runner (``start_runner``) on 127.0.0.1, real channels. Each case calls
with no credentials, wrong ones, or another identity's certificate, asserts
the status and the ErrorInfo reason, that the refusal names nothing of the
runner, that nothing was persisted or executed, and that the coordinator's
credentials still get a normal turn through afterwards.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from runner_svc.app import RunningRunner
from tests.runner.live import dispatch_request, envelope
from turnwire.certs import issue_deployment
from turnwire.errors import error_info
from turnwire.ledger import read_ledger
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.secure_channels import channel_credentials, runner_aio_channel
from turnwire.testing.stack import Stack
from turnwire.transport_security import (
    SECRET_HEADER,
    RunnerAccess,
    RunnerCredentials,
    TlsMaterial,
    new_secret,
)

R = runner_pb2
Call = Callable[[grpc.aio.Channel, Any], Awaitable[object]]


async def _drain(stream: Any) -> list[object]:
    return [reply async for reply in stream]


def _calls(incarnation: str) -> dict[str, Call]:
    """One call per RPC on a runner's port: RunnerService, health and reflection.

    ``metadata`` is passed through, so the same call runs with or without credentials."""
    body = envelope("op_forged")

    def runner(channel: grpc.aio.Channel) -> runner_pb2_grpc.RunnerServiceStub:
        return runner_pb2_grpc.RunnerServiceStub(channel)

    return {
        "GetOperationStatus": lambda ch, md: runner(ch).GetOperationStatus(
            R.GetOperationStatusRequest(operation_id="op_forged"), metadata=md, timeout=5
        ),
        "BatchGetOperationStatus": lambda ch, md: runner(ch).BatchGetOperationStatus(
            R.BatchGetOperationStatusRequest(operation_ids=["op_forged"]), metadata=md, timeout=5
        ),
        "Dispatch": lambda ch, md: runner(ch).Dispatch(
            dispatch_request("op_forged", body, incarnation), metadata=md, timeout=5
        ),
        "Cancel": lambda ch, md: runner(ch).Cancel(
            R.CancelRequest(
                operation_id="op_cancel_forged",
                expected_incarnation_id=incarnation,
                fencing_token=2**63 - 1,
            ),
            metadata=md,
            timeout=5,
        ),
        "Release": lambda ch, md: runner(ch).Release(
            R.ReleaseRequest(
                operation_id="op_forged", expected_incarnation_id=incarnation, fencing_token=1
            ),
            metadata=md,
            timeout=5,
        ),
        "GetRunnerInfo": lambda ch, md: runner(ch).GetRunnerInfo(
            R.GetRunnerInfoRequest(), metadata=md, timeout=5
        ),
        "WatchOperations": lambda ch, md: _drain(
            runner(ch).WatchOperations(
                R.WatchOperationsRequest(after_sequence=0), metadata=md, timeout=5
            )
        ),
        "StreamOutput": lambda ch, md: _drain(
            runner(ch).StreamOutput(
                R.StreamOutputRequest(operation_id="op_forged"), metadata=md, timeout=5
            )
        ),
        "Health.Check": lambda ch, md: health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=""), metadata=md, timeout=5
        ),
        "Health.Watch": lambda ch, md: _drain(
            health_pb2_grpc.HealthStub(ch).Watch(
                health_pb2.HealthCheckRequest(service=""), metadata=md, timeout=5
            )
        ),
        "ServerReflectionInfo": lambda ch, md: _drain(
            reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                metadata=md,
                timeout=5,
            )
        ),
    }


def test_the_cases_cover_every_rpc_of_the_runner_service() -> None:
    """A new RunnerService RPC must be added here too, or this fails."""
    service = runner_pb2.DESCRIPTOR.services_by_name["RunnerService"]
    assert {m.name for m in service.methods} <= set(_calls("x"))


@asynccontextmanager
async def _runner(tmp_path: Path, access: RunnerAccess) -> AsyncIterator[RunningRunner]:
    async with Stack(tmp_path, access=access) as stack:
        runner = await stack.start_runner(
            "runner", executor="metered", ledger_path=stack.ledger, drain_seconds=1.0
        )
        yield runner
        await runner.stop()  # drained, as a runner is told to stop


async def _refused(call: Call, channel: grpc.aio.Channel, metadata: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(channel, metadata)
    return caught.value


def _names_nothing_of(runner: RunningRunner, error: grpc.aio.AioRpcError) -> None:
    """A refused caller learns nothing of the runner: no incarnation, store or digest."""
    typed = error_info(error)
    assert typed is not None
    assert typed.metadata == {}
    text = f"{error.details()} {typed.message} {error.trailing_metadata()}"
    assert runner.incarnation_id not in text and runner.store_id not in text


def _ran_any(ledger: Path) -> bool:
    return ledger.exists() and read_ledger(ledger) != []


async def _nothing_was_done(
    runner: RunningRunner, credentials: RunnerCredentials, ledger: Path
) -> None:
    """No forged row, tombstone or execution; then the coordinator's own turn runs."""
    async with runner_aio_channel(credentials, runner.address) as channel:
        stub = runner_pb2_grpc.RunnerServiceStub(channel)
        for op in ("op_forged", "op_cancel_forged"):
            status = await stub.GetOperationStatus(R.GetOperationStatusRequest(operation_id=op))
            assert not status.present, op
        assert not await asyncio.to_thread(_ran_any, ledger)
        body = envelope("op_real")
        reply = await stub.Dispatch(
            dispatch_request("op_real", body, runner.incarnation_id), timeout=10
        )
        assert not reply.duplicate
        for _ in range(200):  # bounded: 10 s
            asked = R.GetOperationStatusRequest(operation_id="op_real")
            status = await stub.GetOperationStatus(asked)
            if status.operation.HasField("settled_at"):
                break
            await asyncio.sleep(0.05)
        assert status.operation.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
    assert [entry.operation_id for entry in read_ledger(ledger)] == ["op_real"]


@pytest.mark.rule("R11")
@pytest.mark.parametrize(
    ("presented", "reason"),
    [(None, "CREDENTIALS_MISSING"), ("a-wrong-secret-of-enough-length", "CREDENTIALS_UNKNOWN")],
    ids=["no-secret", "wrong-secret"],
)
def test_plaintext_runner_refuses_every_rpc_without_its_secret(
    tmp_path: Path, presented: str | None, reason: str
) -> None:
    """R11: every RPC on the port (RunnerService, health, reflection) without the secret, or
    with another: UNAUTHENTICATED with the reason, naming nothing of the runner; the
    forged Dispatch ran nothing, the forged Cancel left no tombstone, the pinned fencing
    token did not stick; the coordinator's own turn then runs."""
    access = RunnerAccess(secret=new_secret())

    async def scenario() -> None:
        async with _runner(tmp_path, access) as runner:
            metadata = None if presented is None else ((SECRET_HEADER, presented),)
            async with grpc.aio.insecure_channel(runner.address) as channel:
                for name, call in _calls(runner.incarnation_id).items():
                    error = await _refused(call, channel, metadata)
                    assert error.code() is grpc.StatusCode.UNAUTHENTICATED, name
                    typed = error_info(error)
                    assert typed is not None and typed.reason == reason, name
                    _names_nothing_of(runner, error)
            assert runner.gate.refused == len(_calls(""))
            await _nothing_was_done(
                runner, RunnerCredentials.for_access(access), tmp_path / "ledger.jsonl"
            )

    asyncio.run(scenario())


def test_a_secret_in_the_wrong_header_or_as_a_bearer_token_is_not_accepted(
    tmp_path: Path,
) -> None:
    """Only the runner-secret header counts: the right secret sent as
    ``authorization: Bearer`` (the public API's header) is CREDENTIALS_MISSING."""
    access = RunnerAccess(secret=new_secret())

    async def scenario() -> None:
        async with _runner(tmp_path, access) as runner:
            assert access.secret is not None
            async with grpc.aio.insecure_channel(runner.address) as channel:
                error = await _refused(
                    _calls(runner.incarnation_id)["GetRunnerInfo"],
                    channel,
                    (("authorization", f"Bearer {access.secret}"),),
                )
            typed = error_info(error)
            assert typed is not None and typed.reason == "CREDENTIALS_MISSING"

    asyncio.run(scenario())


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One deployment CA: a coordinator, a second coordinator name, two runners; and a
    stranger's CA with a certificate named "coordinator"."""
    directory = tmp_path_factory.mktemp("certs")
    issue_deployment(
        directory, coordinators=("coordinator", "coord-b"), runners=("runner-1", "runner-2")
    )
    issue_deployment(directory / "stranger", coordinators=("coordinator",), runners=())
    return directory


def _tls(directory: Path, name: str) -> TlsMaterial:
    return TlsMaterial.from_files(
        directory / f"{name}.pem", directory / f"{name}.key", directory / "ca.pem"
    )


def test_mutual_tls_runner_serves_its_coordinator_certificate(tmp_path: Path, certs: Path) -> None:
    """The coordinator's certificate (CN coordinator, same CA) gets every RPC through;
    the runner reports its incarnation."""
    access = RunnerAccess(tls=_tls(certs, "runner-1"))

    async def scenario() -> None:
        async with _runner(tmp_path, access) as runner:
            credentials = RunnerCredentials(tls=_tls(certs, "coordinator"))
            async with runner_aio_channel(credentials, runner.address) as channel:
                info = await runner_pb2_grpc.RunnerServiceStub(channel).GetRunnerInfo(
                    R.GetRunnerInfoRequest(), timeout=5
                )
                assert info.incarnation_id == runner.incarnation_id
            assert runner.gate.refused == 0
            await _nothing_was_done(runner, credentials, tmp_path / "ledger.jsonl")

    asyncio.run(scenario())


@pytest.mark.rule("R11")
def test_mutual_tls_runner_refuses_another_identity_of_its_own_ca(
    tmp_path: Path, certs: Path
) -> None:
    """R11: a certificate of the same CA naming another identity (a runner's) proves who it
    is but may not call: PERMISSION_DENIED / CALLER_NOT_ALLOWED on every RPC, nothing
    done, naming nothing of the runner."""
    access = RunnerAccess(tls=_tls(certs, "runner-1"))

    async def scenario() -> None:
        async with _runner(tmp_path, access) as runner:
            other_runner = RunnerCredentials(tls=_tls(certs, "runner-2"))
            async with runner_aio_channel(other_runner, runner.address) as channel:
                for name, call in _calls(runner.incarnation_id).items():
                    error = await _refused(call, channel, None)
                    assert error.code() is grpc.StatusCode.PERMISSION_DENIED, name
                    typed = error_info(error)
                    assert typed is not None and typed.reason == "CALLER_NOT_ALLOWED", name
                    _names_nothing_of(runner, error)
            coordinator = RunnerCredentials(tls=_tls(certs, "coordinator"))
            await _nothing_was_done(runner, coordinator, tmp_path / "ledger.jsonl")

    asyncio.run(scenario())


@pytest.mark.rule("R11")
@pytest.mark.parametrize("client", ["no-certificate", "stranger-ca", "plaintext"])
def test_mutual_tls_runner_cannot_be_reached_without_a_certificate_of_its_ca(
    tmp_path: Path, certs: Path, client: str
) -> None:
    """R11: no client certificate, one from another CA (even named "coordinator"), or no TLS
    at all: the handshake fails (UNAVAILABLE), no handler ever runs, nothing is done."""
    access = RunnerAccess(tls=_tls(certs, "runner-1"))

    def channel_to(address: str) -> grpc.aio.Channel:
        if client == "plaintext":
            return grpc.aio.insecure_channel(address)
        if client == "no-certificate":
            trust_only = channel_credentials(_tls(certs, "coordinator"), present_certificate=False)
            return grpc.aio.secure_channel(address, trust_only)
        stranger = TlsMaterial.from_files(
            certs / "stranger" / "coordinator.pem",
            certs / "stranger" / "coordinator.key",
            certs / "ca.pem",  # trusts the runner, presents a stranger's certificate
        )
        return grpc.aio.secure_channel(address, channel_credentials(stranger))

    async def scenario() -> None:
        async with _runner(tmp_path, access) as runner:
            async with channel_to(runner.address) as channel:
                for name, call in _calls(runner.incarnation_id).items():
                    error = await _refused(call, channel, None)
                    assert error.code() is grpc.StatusCode.UNAVAILABLE, (name, error)
            coordinator = RunnerCredentials(tls=_tls(certs, "coordinator"))
            await _nothing_was_done(runner, coordinator, tmp_path / "ledger.jsonl")

    asyncio.run(scenario())


def test_coordinator_identities_are_the_runners_choice(tmp_path: Path, certs: Path) -> None:
    """A runner started to serve "coord-b" serves that certificate and refuses the
    one named "coordinator" (CALLER_NOT_ALLOWED)."""
    access = RunnerAccess(
        tls=_tls(certs, "runner-1"), coordinator_identities=frozenset({"coord-b"})
    )

    async def scenario() -> None:
        async with _runner(tmp_path, access) as runner:
            allowed = RunnerCredentials(tls=_tls(certs, "coord-b"))
            async with runner_aio_channel(allowed, runner.address) as channel:
                info = await runner_pb2_grpc.RunnerServiceStub(channel).GetRunnerInfo(
                    R.GetRunnerInfoRequest(), timeout=5
                )
                assert info.incarnation_id == runner.incarnation_id
            default_name = RunnerCredentials(tls=_tls(certs, "coordinator"))
            async with runner_aio_channel(default_name, runner.address) as channel:
                error = await _refused(_calls("")["GetRunnerInfo"], channel, None)
            typed = error_info(error)
            assert typed is not None and typed.reason == "CALLER_NOT_ALLOWED"

    asyncio.run(scenario())


@pytest.mark.rule("R11", "C2", "C2a")
def test_a_coordinator_with_the_wrong_secret_sends_nothing_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """R11 with C2/C2a: a coordinator given the wrong runner secret: its watch and status
    calls are turned away, no turn executes (the ledger stays empty, the turn is not
    terminal), and one ERROR line names the runner and the flags to fix."""
    from coordinator_svc.storage import FakeJournal
    from turnwire.testing.dispatcher_rig import Rig

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            runner = await rig.start_runner("r1")
            dispatcher = rig.make_dispatcher(
                runner_credentials=RunnerCredentials(secret=new_secret())
            )
            await dispatcher.start()
            op = await rig.submit({})
            await asyncio.sleep(1.5)
            record = await rig.journal.get(op)
            assert record is not None and not record.state.terminal
            assert runner.gate.refused > 0
            assert not await asyncio.to_thread(_ran_any, rig.ledger)
        finally:
            await rig.close()

    with caplog.at_level("ERROR", logger="coordinator_svc.dispatcher"):
        asyncio.run(scenario())
    refusals = [r for r in caplog.records if "refuses this coordinator" in r.getMessage()]
    assert len(refusals) == 1 and "--runner-secret-file" in refusals[0].getMessage()


@pytest.mark.slow
def test_a_burst_of_3000_anonymous_streams_is_refused_typed_and_the_runner_serves_on(
    tmp_path: Path,
) -> None:
    """3,000 WatchOperations streams without credentials at once, on one connection: every
    one UNAUTHENTICATED / CREDENTIALS_MISSING from the gate (none a bare CANCELLED from
    gRPC's queue of calls waiting for the application, 1,000 by default), and the
    coordinator's own turn runs afterwards."""
    access = RunnerAccess(secret=new_secret())

    async def first(stub: Any) -> str:
        try:
            async for _ in stub.WatchOperations(R.WatchOperationsRequest(), timeout=30):
                return "open"
        except grpc.aio.AioRpcError as error:
            typed = error_info(error)
            return f"{error.code().name}/{typed.reason if typed else error.details()}"
        return "ended"

    async def scenario() -> None:
        async with _runner(tmp_path, access) as runner:
            async with grpc.aio.insecure_channel(runner.address) as channel:
                stub = runner_pb2_grpc.RunnerServiceStub(channel)
                outcomes = await asyncio.gather(*(first(stub) for _ in range(3000)))
            assert collections.Counter(outcomes) == {"UNAUTHENTICATED/CREDENTIALS_MISSING": 3000}
            assert runner.gate.refused == 3000
            await _nothing_was_done(
                runner, RunnerCredentials.for_access(access), tmp_path / "ledger.jsonl"
            )

    asyncio.run(scenario())


def test_undecodable_bytes_are_refused_typed_after_the_gate_on_every_service(
    tmp_path: Path,
) -> None:
    """Bytes that do not decode, on RunnerService, health and reflection: without the
    secret the gate answers first (UNAUTHENTICATED, so nothing was decoded); with it,
    INVALID_ARGUMENT / REQUEST_MALFORMED, never an untyped error naming a Python class."""
    access = RunnerAccess(secret=new_secret())
    methods = [
        ("/turnwire.runner.v1.RunnerService/GetRunnerInfo", False),
        ("/grpc.health.v1.Health/Check", False),
        ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", True),
    ]

    async def answer(channel: grpc.aio.Channel, method: str, streaming: bool) -> Any:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            if streaming:
                call = channel.stream_stream(
                    method, request_serializer=None, response_deserializer=None
                )(iter([b"\xff\xff\xff"]), timeout=5)
                await call.read()
                await call.code()
                raise AssertionError(f"{method} answered undecodable bytes")
            await channel.unary_unary(method, request_serializer=None, response_deserializer=None)(
                b"\xff\xff\xff", timeout=5
            )
        return caught.value

    async def scenario() -> None:
        async with _runner(tmp_path, access) as runner:
            credentials = RunnerCredentials.for_access(access)
            async with (
                grpc.aio.insecure_channel(runner.address) as anonymous,
                runner_aio_channel(credentials, runner.address) as trusted,
            ):
                for method, streaming in methods:
                    refused = await answer(anonymous, method, streaming)
                    assert refused.code() is grpc.StatusCode.UNAUTHENTICATED, method
                    malformed = await answer(trusted, method, streaming)
                    typed = error_info(malformed)
                    assert malformed.code() is grpc.StatusCode.INVALID_ARGUMENT, method
                    assert typed is not None and typed.reason == "REQUEST_MALFORMED", method
                    assert "class" not in (malformed.details() or ""), method

    asyncio.run(scenario())
