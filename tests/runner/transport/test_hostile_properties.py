"""Property: whatever a caller sends, every RunnerService reply is OK or typed, and no
slot leaks (issue 8, items 3 and 6).

Hypothesis throws random field values (0, 2^63-1, 2^63, 2^64-1, empty and huge
strings, foreign ids, random envelope bytes, unknown enum values, undecodable
bytes) at every handler of one real runner on 127.0.0.1:0 over a real channel.
Every reply must be OK or a gRPC error carrying our ErrorInfo, never UNKNOWN or
INTERNAL and never a Python class name; once nothing runs, every slot is free.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner_svc.service import ServiceSettings
from runner_svc.transport.servicer import SERVICE_NAME
from tests.runner.live import Live, live_runner
from turnwire.common.v1 import turn_pb2
from turnwire.errors import error_info
from turnwire.ids import sha256_hex
from turnwire.runner.v1 import runner_pb2

pytestmark = pytest.mark.timeout(300)

R = runner_pb2
METHODS = sorted(R.DESCRIPTOR.services_by_name["RunnerService"].methods_by_name)
STREAMING = {"WatchOperations"}
CALL_TIMEOUT = 10.0
SETTLE_SECONDS = 30.0

# Stand-ins resolved against the live runner when the call is made.
INCARNATION = "<the runner's incarnation>"
NOW = -1  # dispatch_stamp: the current time in microseconds
DIGEST = "<sha256 of the envelope>"

U64 = st.one_of(st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 - 1]), st.integers(0, 2**64 - 1))
U32 = st.one_of(st.sampled_from([0, 1, 2**32 - 1]), st.integers(0, 2**32 - 1))
KNOWN_IDS = st.sampled_from([f"op_{n}" for n in range(40)])  # calls meet each other's rows
HOSTILE_IDS = st.one_of(
    st.sampled_from(["", "x" * 255, "x" * 256, "y" * 20_000, "op\x00nul", "ОП_ю"]),
    st.text(max_size=40),
)
HOSTILE_INCARNATIONS = st.one_of(st.sampled_from(["", "0" * 32]), st.text(max_size=40))
TOKENS = st.integers(1, 4)


@dataclass(frozen=True)
class EnvelopeSpec:
    operation_id: str | None  # None: the Dispatch's own id
    kind: int
    parameters: dict[str, str]
    budget_ms: int = 0
    deadline_seconds: int | None = None

    def build(self, operation_id: str) -> bytes:
        message = R.TurnEnvelope(
            operation_id=operation_id if self.operation_id is None else self.operation_id,
            model=turn_pb2.ModelRef(provider="test", name="builtin", parameters=self.parameters),
            kind=self.kind,  # type: ignore[arg-type]  # unknown values on purpose
            limits=turn_pb2.Limits(budget_ms=self.budget_ms),
        )
        if self.deadline_seconds is not None:
            message.limits.deadline.seconds = self.deadline_seconds
        return message.SerializeToString(deterministic=True)


VALID_KINDS = st.sampled_from([turn_pb2.TURN_KIND_WRITABLE, turn_pb2.TURN_KIND_READ_ONLY])
VALID_ENVELOPES = st.builds(
    EnvelopeSpec,
    operation_id=st.none(),
    kind=VALID_KINDS,
    parameters=st.fixed_dictionaries(
        {}, optional={"sleep_ms": st.sampled_from(["0", "20"]), "fail": st.just("1")}
    ),
)
HOSTILE_ENVELOPES = st.one_of(
    st.binary(max_size=80),  # random envelope bytes
    st.builds(
        EnvelopeSpec,
        operation_id=st.one_of(st.none(), KNOWN_IDS, HOSTILE_IDS),
        kind=st.one_of(VALID_KINDS, st.sampled_from([0, 3, 99, 2**31 - 1])),  # unknown enums
        parameters=st.fixed_dictionaries(
            {},
            optional={
                "sleep_ms": st.sampled_from(["0", "20", "-1", "x", "9" * 20]),
                "fail": st.sampled_from(["1", "0", "maybe"]),
                "output": st.text(max_size=20),
            },
        ),
        budget_ms=U64,
        deadline_seconds=st.one_of(
            st.none(), st.sampled_from([0, 1, -(2**63), 2**63 - 1, int(time.time()) + 3600])
        ),
    ),
)


@dataclass(frozen=True)
class Call:
    method: str
    fields: dict[str, Any]
    raw: bytes | None = None  # sent as is, without a serializer


def _call(method: str, valid: dict[str, Any], hostile: dict[str, Any]) -> Any:
    """A valid request with up to three fields replaced by hostile values: most calls get
    deep enough to admit, cancel, settle and release, and every field is often hostile."""

    @st.composite
    def calls(draw: Any) -> Call:
        fields = {name: draw(strategy) for name, strategy in valid.items()}
        for name in draw(st.sets(st.sampled_from(sorted(hostile)), max_size=3)):
            fields[name] = draw(hostile[name])
        return Call(method, fields)

    return calls() if hostile else st.just(Call(method, {}))


_OPERATION = {"operation_id": KNOWN_IDS}
_HOSTILE_OPERATION = {"operation_id": HOSTILE_IDS}
_FENCED = {"expected_incarnation_id": st.just(INCARNATION), "fencing_token": TOKENS}
_HOSTILE_FENCED = {"expected_incarnation_id": HOSTILE_INCARNATIONS, "fencing_token": U64}
DISPATCH = _call(
    "Dispatch",
    {
        **_OPERATION,
        **_FENCED,
        "envelope": VALID_ENVELOPES,
        "envelope_digest": st.just(DIGEST),
        "attempt": st.integers(1, 3),
        "dispatch_stamp": st.just(NOW),
    },
    {
        **_HOSTILE_OPERATION,
        **_HOSTILE_FENCED,
        "envelope": HOSTILE_ENVELOPES,
        "envelope_digest": st.text(max_size=70),
        "attempt": U32,
        "dispatch_stamp": U64,
    },
)
CALLS = st.one_of(
    DISPATCH,
    DISPATCH,
    _call("Cancel", {**_OPERATION, **_FENCED}, {**_HOSTILE_OPERATION, **_HOSTILE_FENCED}),
    _call("Release", {**_OPERATION, **_FENCED}, {**_HOSTILE_OPERATION, **_HOSTILE_FENCED}),
    _call("GetOperationStatus", _OPERATION, _HOSTILE_OPERATION),
    _call(
        "BatchGetOperationStatus",
        {"operation_ids": st.lists(KNOWN_IDS, max_size=5)},
        {"operation_ids": st.lists(st.one_of(KNOWN_IDS, HOSTILE_IDS), max_size=5)},
    ),
    _call("GetRunnerInfo", {}, {}),
    _call("WatchOperations", {"after_sequence": st.integers(0, 50)}, {"after_sequence": U64}),
    st.builds(Call, st.sampled_from(METHODS), st.just({}), st.binary(max_size=64)),
)
OUTCOMES: Counter[str] = Counter()
# Ids a Dispatch was accepted for: a hostile envelope may ask for a sleep of
# 10^17 s with no budget and no deadline, which legitimately holds its slot
# until cancelled, so "no slot leaks" is checked once every one is cancelled.
ADMITTED: set[str] = set()


def _request(live: Live, call: Call) -> Any:
    """The request message, with the stand-ins resolved."""
    values = dict(call.fields)
    if values.get("expected_incarnation_id") == INCARNATION:
        values["expected_incarnation_id"] = live.incarnation
    if values.get("dispatch_stamp") == NOW:
        values["dispatch_stamp"] = int(time.time() * 1_000_000)
    envelope = values.get("envelope")
    if isinstance(envelope, EnvelopeSpec):
        values["envelope"] = envelope = envelope.build(values["operation_id"])
    if values.get("envelope_digest") == DIGEST:
        values["envelope_digest"] = sha256_hex(envelope or b"")
    request_type = R.DESCRIPTOR.services_by_name["RunnerService"].methods_by_name[call.method]
    return getattr(R, request_type.input_type.name)(**values)


async def _perform(live: Live, call: Call) -> None:
    """Send one call; the reply must be OK or typed (never UNKNOWN/INTERNAL, no internals)."""
    path = f"/{SERVICE_NAME}/{call.method}"
    payload = call.raw if call.raw is not None else _request(live, call).SerializeToString()
    try:
        if call.method in STREAMING:
            stream = live.channel.unary_stream(path)(payload, timeout=CALL_TIMEOUT)
            try:
                await stream.read()  # rows or a heartbeat: the stream works
            finally:
                stream.cancel()
        else:
            await live.channel.unary_unary(path)(payload, timeout=CALL_TIMEOUT)
            if call.method == "Dispatch" and call.raw is None:
                ADMITTED.add(call.fields["operation_id"])
        OUTCOMES[f"{call.method}: OK"] += 1
    except grpc.aio.AioRpcError as error:
        details = error.details() or ""
        assert error.code() not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), (
            call,
            error.code(),
            details,
        )
        assert "<class" not in details and "Traceback" not in details, (call, details)
        typed = error_info(error)
        assert typed is not None, (call, error.code(), details)
        assert typed.metadata.get("incarnation_id") == live.incarnation, (call, typed)
        OUTCOMES[f"{call.method}: {typed.reason}"] += 1


async def _cancel_admitted(live: Live) -> None:
    """Cancel every admitted turn (the highest token a caller may send wins)."""
    for operation_id in sorted(ADMITTED):
        await live.stub.Cancel(
            R.CancelRequest(
                operation_id=operation_id,
                expected_incarnation_id=live.incarnation,
                fencing_token=2**63 - 1,
            ),
            timeout=CALL_TIMEOUT,
        )


async def _all_slots_free(live: Live) -> R.GetRunnerInfoResponse:
    """Bounded wait until nothing runs; the last info either way."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
        if all(pool.in_use == 0 for pool in info.pools) or time.monotonic() > deadline:
            return info
        await asyncio.sleep(0.05)


def test_every_handler_answers_hostile_values_typed_and_leaks_no_slot(tmp_path: Path) -> None:
    """Issue 8.3/8.6 property: OK or typed ErrorInfo for every call; all slots free after."""
    loop = asyncio.new_event_loop()
    runner = live_runner(
        tmp_path / "runner.db",
        settings=ServiceSettings(writable_slots=2, read_only_slots=2, heartbeat_seconds=0.05),
    )
    live = loop.run_until_complete(runner.__aenter__())
    try:

        @settings(
            max_examples=150,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(calls=st.lists(CALLS, min_size=1, max_size=3))
        def property_holds(calls: list[Call]) -> None:
            for call in calls:
                loop.run_until_complete(_perform(live, call))

        OUTCOMES.clear()
        ADMITTED.clear()
        property_holds()
        # Not vacuous: turns were admitted (and so ran, settled, were cancelled...).
        assert OUTCOMES["Dispatch: OK"] > 0, OUTCOMES
        loop.run_until_complete(_cancel_admitted(live))
        info = loop.run_until_complete(_all_slots_free(live))
        assert [(pool.kind, pool.in_use) for pool in info.pools] == [
            (pool.kind, 0) for pool in info.pools
        ]
        assert info.held_result_not_saved == 0
    finally:
        loop.run_until_complete(runner.__aexit__(None, None, None))
        loop.close()
