"""Per-principal quotas at SubmitTurn (issue 9): RESOURCE_EXHAUSTED / QUOTA_EXCEEDED
with a google.rpc.RetryInfo, nothing stored, and a retried submit never refused; and
the live wait reason on every read."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from coordinator_svc.core.model import OpState
from coordinator_svc.core.quotas import PrincipalLimits, Quotas
from coordinator_svc.ports import Journal
from coordinator_svc.storage import FakeJournal
from tests.coordinator.api.conftest import Store
from tests.coordinator.api.harness import (
    ALICE,
    BOB,
    FakeDispatch,
    rpc_error,
    serving,
    submit_request,
    typed_error,
)
from turnwire.client.failures import RetryLater, exception_for
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1.coordinator_pb2 import (
    OPERATION_STATE_CANCELLED,
    CancelOperationRequest,
    GetOperationRequest,
    ListOperationsRequest,
)
from turnwire.testing.dispatcher_rig import Rig


def _dispatch(journal: Journal, limits: PrincipalLimits, clock: list[float]) -> FakeDispatch:
    return FakeDispatch(journal, quotas=Quotas(limits), clock=lambda: clock[0])


def test_over_max_queued_is_refused_with_retry_info_and_stores_nothing(store: Store) -> None:
    """Issue 9: the third QUEUED turn of a principal limited to two is refused, typed,
    with RetryInfo; nothing is stored; another principal is not affected."""

    async def scenario(journal: Journal) -> None:
        clock = [0.0]
        dispatch = _dispatch(journal, PrincipalLimits(max_queued=2), clock)
        async with serving(journal, dispatch=dispatch) as h:
            stub = h.stub()
            for key in ("k1", "k2"):
                await stub.SubmitTurn(submit_request(key), metadata=ALICE)
            refused = await typed_error(stub.SubmitTurn(submit_request("k3"), metadata=ALICE))
            assert refused.code is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert refused.reason == "QUOTA_EXCEEDED"
            assert refused.metadata == {"limit": "max_queued", "allowed": "2", "current": "2"}
            assert refused.retry_after == 1.0
            listed = await journal.list_for_principal("alice", [], 10, None)
            assert len(listed) == 2  # nothing stored for k3
            await stub.SubmitTurn(submit_request("k1"), metadata=BOB)  # bob has room

    store.run(scenario)


@pytest.mark.rule("C1")
def test_a_retried_submit_over_quota_is_answered_as_a_replay(store: Store) -> None:
    """C1 wins over quotas: a lost reply retried with the same key and request returns
    the accepted turn even when the principal is at its limit; a different request under
    that key is still IDEMPOTENCY_KEY_REUSED."""

    async def scenario(journal: Journal) -> None:
        dispatch = _dispatch(journal, PrincipalLimits(max_in_flight=1), [0.0])
        async with serving(journal, dispatch=dispatch) as h:
            stub = h.stub()
            first = await stub.SubmitTurn(submit_request("k1"), metadata=ALICE)
            again = await stub.SubmitTurn(submit_request("k1"), metadata=ALICE)
            assert again.replayed and again.operation.operation_id == first.operation.operation_id
            other = submit_request("k1", max_attempts=3)
            reused = await typed_error(stub.SubmitTurn(other, metadata=ALICE))
            assert reused.reason == "IDEMPOTENCY_KEY_REUSED"
            full = await typed_error(stub.SubmitTurn(submit_request("k2"), metadata=ALICE))
            assert (full.reason, full.metadata["limit"]) == ("QUOTA_EXCEEDED", "max_in_flight")

    store.run(scenario)


def test_a_finished_turn_frees_room_under_max_in_flight(store: Store) -> None:
    """Issue 9: the in-flight count is of turns not yet terminal."""

    async def scenario(journal: Journal) -> None:
        dispatch = _dispatch(journal, PrincipalLimits(max_in_flight=1), [0.0])
        async with serving(journal, dispatch=dispatch) as h:
            stub = h.stub()
            first = await stub.SubmitTurn(submit_request("k1"), metadata=ALICE)
            full = await typed_error(stub.SubmitTurn(submit_request("k2"), metadata=ALICE))
            assert full.reason == "QUOTA_EXCEEDED"
            record = await journal.get(first.operation.operation_id)
            assert record is not None
            cancelled = await dispatch.request_cancel(record)
            assert cancelled.state is OpState.CANCELLED
            await stub.SubmitTurn(submit_request("k2"), metadata=ALICE)

    store.run(scenario)


def test_submit_rate_refusal_says_when_the_next_token_comes(store: Store) -> None:
    """Issue 9: a token bucket (2/s, burst 1): the second submit in the same instant
    waits 0.5 s; after that it passes. The SDK surfaces RetryLater with retry_after."""

    async def scenario(journal: Journal) -> None:
        clock = [100.0]
        dispatch = _dispatch(journal, PrincipalLimits(submit_rate=2.0, submit_burst=1), clock)
        async with serving(journal, dispatch=dispatch) as h:
            stub = h.stub()
            await stub.SubmitTurn(submit_request("k1"), metadata=ALICE)
            error = await rpc_error(stub.SubmitTurn(submit_request("k2"), metadata=ALICE))
            raised = exception_for(error)
            assert isinstance(raised, RetryLater) and raised.reason == "QUOTA_EXCEEDED"
            assert raised.retry_after == 0.5 and raised.metadata["limit"] == "submit_rate"
            clock[0] += 0.5
            await stub.SubmitTurn(submit_request("k2"), metadata=ALICE)

    store.run(scenario)


def test_every_read_of_a_waiting_operation_carries_what_it_waits_for(store: Store) -> None:
    """§8.2 (issue 9): Get, List and Submit answers fill Operation.waiting_for from the
    dispatcher for a non-terminal operation, and leave it empty once it is terminal."""

    async def scenario(journal: Journal) -> None:
        dispatch = FakeDispatch(journal)
        async with serving(journal, dispatch=dispatch) as h:
            stub = h.stub()
            submitted = await stub.SubmitTurn(submit_request("k1"), metadata=ALICE)
            assert submitted.operation.waiting_for == "waiting (FakeDispatch)"
            op_id = submitted.operation.operation_id
            got = await stub.GetOperation(GetOperationRequest(operation_id=op_id), metadata=ALICE)
            listed = await stub.ListOperations(ListOperationsRequest(), metadata=ALICE)
            assert got.operation.waiting_for == listed.operations[0].waiting_for != ""
            cancelled = await stub.CancelOperation(
                CancelOperationRequest(operation_id=op_id), metadata=ALICE
            )
            assert cancelled.operation.state == OPERATION_STATE_CANCELLED
            assert cancelled.operation.waiting_for == ""

    store.run(scenario)


def test_the_real_dispatcher_counts_what_it_accepted_and_frees_room_at_the_end(
    tmp_path: Path,
) -> None:
    """Issue 9 through the real Dispatcher (not FakeDispatch) and a real runner: a
    principal limited to one turn in flight is refused a second while the first runs,
    with RetryInfo, and may submit again once the first is terminal."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            dispatcher = await rig.sized_dispatcher(
                1, quotas=Quotas(PrincipalLimits(max_in_flight=1))
            )
            async with serving(rig.journal, dispatch=dispatcher) as h:
                stub = h.stub()
                # A turn that runs long enough to still be in flight at the second submit.
                slow = turn_pb2.ModelRef(
                    provider="test", name="metered", parameters={"sleep_ms": "1500"}
                )
                first = await stub.SubmitTurn(submit_request("k1", model=slow), metadata=ALICE)
                refused = await typed_error(stub.SubmitTurn(submit_request("k2"), metadata=ALICE))
                assert (refused.reason, refused.metadata["limit"]) == (
                    "QUOTA_EXCEEDED",
                    "max_in_flight",
                )
                assert refused.retry_after == 1.0
                await rig.terminal(first.operation.operation_id)
                await stub.SubmitTurn(submit_request("k2"), metadata=ALICE)
        finally:
            await rig.close()

    asyncio.run(scenario())
