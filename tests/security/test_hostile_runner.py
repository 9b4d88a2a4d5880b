"""Issue 11: forged calls to a runner's RunnerService, without and with credentials.

The same live stack as test_hostile_coordinator.py, one per case (a real runner
with the metered executor and its ledger, a real coordinator routing to it, on
127.0.0.1). A forger calls the runner directly:

- without the coordinator's secret, or with a near miss of it (whitespace, a
  prefix, a second header, a binary header): the gate turns every call away
  before it is decoded (R11), naming nothing of the runner;
- with the secret (the coordinator's credentials): malformed Dispatches (digest,
  incarnation, stamp, fencing token, envelope, ids, undecodable bytes) are
  refused with a typed reason that names the runner's incarnation (C8a); a
  Cancel of an unknown id leaves a tombstone, by design (R5), even with the
  largest fencing token; calls aimed at a turn the coordinator ran never run it
  again (R2, §5).

Each case asserts the status, the ErrorInfo reason, that the runner's store and
the metered ledger hold nothing the protocol does not call for (no row, no
execution), and that a normal turn through the coordinator still succeeds
(``Stack.assert_unharmed``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.runner.live import dispatch_request, envelope
from tests.security.hostile_stack import Stack, expect, run
from tests.support import runner_access
from turnwire.ids import sha256_hex
from turnwire.runner.v1 import runner_pb2 as R
from turnwire.runner.v1 import runner_pb2_grpc
from turnwire.transport_security import SECRET_HEADER

pytestmark = pytest.mark.timeout(60)

S = grpc.StatusCode
SECRET = runner_access.SECRET
FORGED, FORGED_CANCEL = "op_forged", "op_forged_cancel"


def stub(channel: grpc.aio.Channel) -> runner_pb2_grpc.RunnerServiceStub:
    return runner_pb2_grpc.RunnerServiceStub(channel)


async def with_credentials(stack: Stack, call: Callable[[Any], Awaitable[Any]]) -> Any:
    """``call(stub)`` on a channel presenting the coordinator's secret."""
    async with runner_access.aio_channel(stack.runner.address) as channel:
        return await call(stub(channel))


def forged(stack: Stack, op: str = FORGED, **fields: Any) -> R.DispatchRequest:
    """A well-formed Dispatch for ``op`` bound to the runner's incarnation; ``fields``
    override its fields."""
    request = dispatch_request(op, envelope(op), stack.runner.incarnation_id)
    for name, value in fields.items():
        setattr(request, name, value)
    return request


# --- without the coordinator's credentials -------------------------------------------


NEAR_MISSES: dict[str, tuple[tuple[tuple[str, Any], ...], str]] = {
    "trailing-space": (((SECRET_HEADER, SECRET + " "),), "CREDENTIALS_UNKNOWN"),
    "leading-space": (((SECRET_HEADER, " " + SECRET),), "CREDENTIALS_UNKNOWN"),
    "prefix": (((SECRET_HEADER, SECRET[:-1]),), "CREDENTIALS_UNKNOWN"),
    "empty": (((SECRET_HEADER, ""),), "CREDENTIALS_UNKNOWN"),
    "wrong-then-right": (
        ((SECRET_HEADER, "x" * 43), (SECRET_HEADER, SECRET)),
        "CREDENTIALS_UNKNOWN",
    ),
    "binary-header": (((SECRET_HEADER + "-bin", SECRET.encode()),), "CREDENTIALS_MISSING"),
}


@pytest.mark.parametrize("case", list(NEAR_MISSES))
def test_a_near_miss_of_the_runner_secret_is_unauthenticated_and_does_nothing(
    tmp_path: Path, case: str
) -> None:
    """Only the first x-turnwire-runner-secret header, exactly the secret, counts. A
    forged Dispatch and a Cancel pinning the largest fencing token are turned away,
    naming nothing of the runner: no row, no tombstone, no execution."""
    metadata, reason = NEAR_MISSES[case]

    async def scenario(stack: Stack) -> None:
        before, refused_before = await stack.snapshot(), stack.runner.gate.refused
        cancel = R.CancelRequest(
            operation_id=FORGED_CANCEL,
            expected_incarnation_id=stack.runner.incarnation_id,
            fencing_token=2**63 - 1,
        )
        async with grpc.aio.insecure_channel(stack.runner.address) as channel:
            for call in (
                stub(channel).Dispatch(forged(stack), metadata=metadata),
                stub(channel).Cancel(cancel, metadata=metadata),
                stub(channel).GetRunnerInfo(R.GetRunnerInfoRequest(), metadata=metadata),
            ):
                info = await expect(call, S.UNAUTHENTICATED, reason, {})
                assert stack.runner.incarnation_id not in info.message
        assert stack.runner.gate.refused == refused_before + 3
        await stack.assert_unharmed(before)

    run(tmp_path, scenario)


def test_the_first_secret_header_is_the_one_judged(tmp_path: Path) -> None:
    """The right secret first and a wrong one after: served (the first header counts, as
    the wrong-then-right case above is refused). A read, so nothing is written."""

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        metadata = ((SECRET_HEADER, SECRET), (SECRET_HEADER, "x" * 43))
        asked = R.GetOperationStatusRequest(operation_id=FORGED)
        async with grpc.aio.insecure_channel(stack.runner.address) as channel:
            status = await stub(channel).GetOperationStatus(asked, metadata=metadata)
        assert status.incarnation_id == stack.runner.incarnation_id and not status.present
        await stack.assert_unharmed(before)

    run(tmp_path, scenario)


# --- with the coordinator's credentials: forged Dispatches ----------------------------


def _raw_envelope(body: bytes) -> dict[str, Any]:
    return {"envelope": body, "envelope_digest": sha256_hex(body)}


LONG = "o" * 1000


def _forge(stack: Stack, case: str) -> R.DispatchRequest | bytes:
    """The forged Dispatch of ``case`` (bytes: sent as they are)."""
    match case:
        case "wrong-digest":
            return forged(stack, envelope_digest="0" * 64)
        case "other-incarnation":
            return forged(stack, expected_incarnation_id="f" * 32)
        case "no-incarnation":
            return forged(stack, expected_incarnation_id="")
        case "no-dispatch-stamp":
            return forged(stack, dispatch_stamp=0)
        case "ancient-stamp":
            return forged(stack, dispatch_stamp=1)
        case "fencing-token-2^63":
            return forged(stack, fencing_token=2**63)
        case "carried-release-2^64-1":
            request = forged(stack)
            request.releases.add(operation_id=FORGED_CANCEL, fencing_token=2**64 - 1)
            return request
        case "envelope-not-protobuf":
            return forged(stack, **_raw_envelope(b"\x0a\xff"))
        case "envelope-another-message":
            other = R.GetRunnerInfoResponse(incarnation_id="x" * 32, version="1")
            return forged(stack, **_raw_envelope(other.SerializeToString()))
        case "envelope-names-another-id":
            return forged(stack, **_raw_envelope(envelope(FORGED_CANCEL)))
        case "envelope-kind-999":
            odd = R.TurnEnvelope(operation_id=FORGED, kind=999)  # type: ignore[arg-type]
            return forged(stack, **_raw_envelope(odd.SerializeToString()))
        case "1000-byte-id":
            return forged(stack, LONG, **_raw_envelope(envelope(LONG)))
        case "undecodable-bytes":
            return b"\xff\xff\xff"
        case "operation-id-not-utf8":
            return b"\x0a\x05op_\xc3\x28"
    raise AssertionError(case)


INVALID, REFUSED = S.INVALID_ARGUMENT, S.FAILED_PRECONDITION
DISPATCHES: dict[str, tuple[grpc.StatusCode, str, str | None]] = {
    "wrong-digest": (INVALID, "ENVELOPE_INVALID", None),
    "other-incarnation": (REFUSED, "INCARNATION_MISMATCH", None),
    "no-incarnation": (REFUSED, "INCARNATION_MISMATCH", None),
    "no-dispatch-stamp": (INVALID, "ARGUMENT_INVALID", "dispatch_stamp"),
    "ancient-stamp": (REFUSED, "DISPATCH_STALE", None),
    "fencing-token-2^63": (INVALID, "ARGUMENT_INVALID", "fencing_token"),
    "carried-release-2^64-1": (INVALID, "ARGUMENT_INVALID", "releases[0].fencing_token"),
    "envelope-not-protobuf": (INVALID, "ENVELOPE_INVALID", None),
    "envelope-another-message": (INVALID, "ENVELOPE_INVALID", None),
    "envelope-names-another-id": (INVALID, "ENVELOPE_INVALID", None),
    "envelope-kind-999": (INVALID, "ENVELOPE_INVALID", None),
    "1000-byte-id": (INVALID, "ENVELOPE_INVALID", None),
    "undecodable-bytes": (INVALID, "REQUEST_MALFORMED", None),
    "operation-id-not-utf8": (INVALID, "REQUEST_MALFORMED", None),
}


@pytest.mark.rule("C8a")
@pytest.mark.parametrize("case", list(DISPATCHES))
def test_a_forged_dispatch_with_credentials_is_refused_typed_and_never_runs(
    tmp_path: Path, case: str
) -> None:
    """Refused with the reason (and field), naming the runner's incarnation (C8a); no row
    for any id it names, no execution, no slot held; a normal turn runs afterwards."""
    code, reason, field = DISPATCHES[case]

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        request = _forge(stack, case)
        async with runner_access.aio_channel(stack.runner.address) as channel:
            if isinstance(request, bytes):
                dispatch = channel.unary_unary("/turnwire.runner.v1.RunnerService/Dispatch")
                info = await expect(dispatch(request), code, reason)
            else:
                info = await expect(stub(channel).Dispatch(request, timeout=10), code, reason)
            pools = (await stub(channel).GetRunnerInfo(R.GetRunnerInfoRequest())).pools
        assert info.metadata["incarnation_id"] == stack.runner.incarnation_id
        assert field is None or info.metadata["field"] == field
        assert {pool.in_use for pool in pools} == {0}
        await stack.assert_unharmed(before)

    run(tmp_path, scenario)


# --- with the coordinator's credentials: other calls ----------------------------------


NAMING_CALLS = ["GetOperationStatus", "BatchGetOperationStatus", "Cancel", "Release"]


def _other_calls(stack: Stack, operation_id: str, incarnation: str) -> dict[str, Any]:
    """Every RunnerService call but Dispatch that names an operation, as (stub) -> call."""
    cancel = R.CancelRequest(
        operation_id=operation_id, expected_incarnation_id=incarnation, fencing_token=2**63 - 1
    )
    release = R.ReleaseRequest(
        operation_id=operation_id, expected_incarnation_id=incarnation, fencing_token=2**63 - 1
    )
    return {
        "GetOperationStatus": lambda s: s.GetOperationStatus(
            R.GetOperationStatusRequest(operation_id=operation_id)
        ),
        "BatchGetOperationStatus": lambda s: s.BatchGetOperationStatus(
            R.BatchGetOperationStatusRequest(operation_ids=[FORGED, operation_id])
        ),
        "Cancel": lambda s: s.Cancel(cancel),
        "Release": lambda s: s.Release(release),
    }


@pytest.mark.parametrize("rpc", NAMING_CALLS)
def test_a_1000_byte_operation_id_is_argument_invalid_and_leaves_no_row(
    tmp_path: Path, rpc: str
) -> None:
    """Ids are 1..255 characters: refused before the store is touched (a Cancel of it
    leaves no tombstone, a Release pins no token); the refusal is not swollen by the id."""

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        call = _other_calls(stack, LONG, stack.runner.incarnation_id)[rpc]
        info = await with_credentials(stack, lambda s: expect(call(s), INVALID, "ARGUMENT_INVALID"))
        assert info.metadata["incarnation_id"] == stack.runner.incarnation_id
        assert LONG not in info.message
        await stack.assert_unharmed(before)

    run(tmp_path, scenario)


@pytest.mark.rule("C5", "C8a")
@pytest.mark.parametrize("rpc", ["Cancel", "Release"])
def test_a_cancel_or_release_bound_to_another_incarnation_is_refused_and_writes_nothing(
    tmp_path: Path, rpc: str
) -> None:
    """C5/C8a: INCARNATION_MISMATCH before anything is written: no tombstone, no token."""

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        call = _other_calls(stack, FORGED_CANCEL, "0" * 32)[rpc]
        info = await with_credentials(
            stack, lambda s: expect(call(s), REFUSED, "INCARNATION_MISMATCH")
        )
        assert info.metadata == {
            "incarnation_id": stack.runner.incarnation_id,
            "operation_id": FORGED_CANCEL,
        }
        await stack.assert_unharmed(before)

    run(tmp_path, scenario)


@pytest.mark.rule("R5")
def test_pinning_the_largest_fencing_token_on_unknown_ids_does_not_block_the_coordinator(
    tmp_path: Path,
) -> None:
    """With credentials, Cancel of an unknown id at 2^63-1 leaves a tombstone (R5, by
    design) that refuses its Dispatch (CANCELLED_BEFORE_DISPATCH) and never runs; a
    Release at 2^63-1 of an unknown id answers released=false and writes no row. The
    coordinator's turns use fresh ids: a normal turn succeeds, and the coordinator's
    own Release of it still lands (the row ends released)."""

    async def scenario(stack: Stack) -> None:
        before = await stack.snapshot()
        calls = _other_calls(stack, FORGED_CANCEL, stack.runner.incarnation_id)
        cancelled = await with_credentials(stack, calls["Cancel"])
        assert cancelled.tombstoned and cancelled.operation.fencing_token == 2**63 - 1
        assert cancelled.operation.state == R.RUNNER_OPERATION_STATE_TOMBSTONED
        released = await with_credentials(
            stack, _other_calls(stack, FORGED, stack.runner.incarnation_id)["Release"]
        )
        assert not released.released
        late = forged(stack, FORGED_CANCEL, fencing_token=2**63 - 1)
        info = await with_credentials(
            stack, lambda s: expect(s.Dispatch(late), REFUSED, "CANCELLED_BEFORE_DISPATCH")
        )
        assert info.metadata["incarnation_id"] == stack.runner.incarnation_id
        normal = await stack.normal_turn()
        await _until_released(stack, normal)
        await stack.assert_unharmed(
            before,
            stored=[("alice", normal)],
            executed=[normal],
            rows=[FORGED_CANCEL, normal],
        )

    run(tmp_path, scenario)


async def _until_released(stack: Stack, operation_id: str) -> None:
    asked = R.GetOperationStatusRequest(operation_id=operation_id)
    for _ in range(100):  # bounded: 5 s
        status = await with_credentials(stack, lambda s: s.GetOperationStatus(asked))
        if status.operation.released:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the coordinator never released {operation_id}")


# --- with the coordinator's credentials: the coordinator's own turn -------------------


@pytest.mark.rule("R2")
@pytest.mark.parametrize(
    ("case", "code", "reason"),
    [
        ("other-envelope", S.ALREADY_EXISTS, "ENVELOPE_MISMATCH"),
        ("lower-fencing-token", REFUSED, "STALE_FENCING_TOKEN"),
        ("exact-replay", None, None),
    ],
)
def test_a_forged_dispatch_of_a_turn_the_coordinator_ran_never_runs_it_again(
    tmp_path: Path, case: str, code: grpc.StatusCode | None, reason: str | None
) -> None:
    """R2, §5: the same id with another envelope is ENVELOPE_MISMATCH, a lower fencing
    token STALE_FENCING_TOKEN; the exact bytes again are answered duplicate=true with the
    settled row. In every case the turn ran once and its row is unchanged."""

    async def scenario(stack: Stack) -> None:
        op = await stack.normal_turn()
        record = await stack.coordinator.journal.get(op)
        assert record is not None
        before = await stack.snapshot()
        asked = R.GetOperationStatusRequest(operation_id=op)
        row = (await with_credentials(stack, lambda s: s.GetOperationStatus(asked))).operation
        request = forged(stack, op, **_raw_envelope(record.envelope))
        request.fencing_token = record.fencing_token
        if case == "other-envelope":
            request = forged(stack, op, fencing_token=record.fencing_token)
        elif case == "lower-fencing-token":
            request.fencing_token = record.fencing_token - 1
        if code is None:
            reply = await with_credentials(stack, lambda s: s.Dispatch(request))
            assert reply.duplicate and reply.operation.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
        else:
            assert reason is not None
            info = await with_credentials(
                stack, lambda s: expect(s.Dispatch(request), code, reason)
            )
            assert info.metadata["incarnation_id"] == stack.runner.incarnation_id
        again = (await with_credentials(stack, lambda s: s.GetOperationStatus(asked))).operation
        assert again == row
        await stack.assert_unharmed(before)

    run(tmp_path, scenario)
