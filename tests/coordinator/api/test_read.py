"""GetOperation and ListOperations: typed status, tenant isolation (§7, §8.8), paging."""

from __future__ import annotations

import asyncio

import grpc

from coordinator_svc.core.model import OpState
from coordinator_svc.ports import Journal
from coordinator_svc.storage import FakeJournal
from tests.coordinator.api.conftest import Store
from tests.coordinator.api.harness import (
    ALICE,
    BOB,
    advance,
    rpc_error,
    run_to_success,
    serving,
    submit_request,
    typed_error,
)
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.ids import new_operation_id

_QUEUED = coordinator_pb2.OPERATION_STATE_QUEUED
_CANCELLED = coordinator_pb2.OPERATION_STATE_CANCELLED


def test_get_returns_the_typed_status_of_a_finished_operation(store: Store) -> None:
    """§7: status shows state, execution, attempts, runner, incarnation, result, times."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            op_id = (await stub.SubmitTurn(submit_request(), metadata=ALICE)).operation.operation_id
            await run_to_success(journal, op_id)
            op = (
                await stub.GetOperation(
                    coordinator_pb2.GetOperationRequest(operation_id=op_id), metadata=ALICE
                )
            ).operation
            assert op.state == coordinator_pb2.OPERATION_STATE_SUCCEEDED
            assert op.execution == turn_pb2.EXECUTION_STARTED
            assert op.attempt_count == 1 and op.runner == "r1" and op.incarnation_id == "a" * 32
            assert op.result.output == b"done"
            assert op.last_event_sequence == 4
            assert op.HasField("finished_at") and op.HasField("last_attempt_at")
            assert not op.HasField("error")

    store.run(scenario)


def test_another_principals_operation_is_not_found_exactly_like_a_random_id(
    store: Store,
) -> None:
    """§7/§8.8: another principal's id gives byte-identical NOT_FOUND to a random id."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            op_id = (await stub.SubmitTurn(submit_request(), metadata=ALICE)).operation.operation_id
            calls = {
                "get": lambda i, md: stub.GetOperation(
                    coordinator_pb2.GetOperationRequest(operation_id=i), metadata=md
                ),
                "cancel": lambda i, md: stub.CancelOperation(
                    coordinator_pb2.CancelOperationRequest(operation_id=i), metadata=md
                ),
                "watch": lambda i, md: stub.WatchOperation(
                    coordinator_pb2.WatchOperationRequest(operation_id=i), metadata=md
                ).read(),
            }
            for name, call in calls.items():
                foreign = await rpc_error(call(op_id, BOB))
                random = await rpc_error(call(new_operation_id(), BOB))
                assert foreign.code() == grpc.StatusCode.NOT_FOUND, name
                assert foreign.code() == random.code(), name
                assert foreign.details() == random.details(), name
                assert foreign.trailing_metadata() == random.trailing_metadata(), name
                assert (await typed_error(call(op_id, BOB))).reason == "OPERATION_NOT_FOUND"
            record = await journal.get(op_id)
            assert record is not None
            assert not record.cancel_requested and record.state is OpState.QUEUED

    store.run(scenario)


def test_list_pages_through_own_operations_with_a_state_filter(store: Store) -> None:
    """§7: ListOperations filters by state, pages with opaque tokens, shows only own ops."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            ids = []
            for n in range(7):
                reply = await stub.SubmitTurn(submit_request(f"k{n}"), metadata=ALICE)
                ids.append(reply.operation.operation_id)
            await stub.SubmitTurn(submit_request("bob"), metadata=BOB)
            for op_id in ids[1:3]:
                await advance(journal, op_id, OpState.CANCELLED)
            seen, token, pages = [], "", 0
            while pages < 10:
                page = await stub.ListOperations(
                    coordinator_pb2.ListOperationsRequest(
                        states=[_QUEUED], page_size=2, page_token=token
                    ),
                    metadata=ALICE,
                )
                pages += 1
                assert len(page.operations) <= 2
                seen += [o.operation_id for o in page.operations]
                assert all(o.state == _QUEUED for o in page.operations)
                token = page.next_page_token
                if not token:
                    break
            assert seen == [ids[0], *ids[3:]]
            assert pages == 3
            everything = await stub.ListOperations(
                coordinator_pb2.ListOperationsRequest(), metadata=ALICE
            )
            assert [o.operation_id for o in everything.operations] == ids
            assert everything.next_page_token == ""
            cancelled = await stub.ListOperations(
                coordinator_pb2.ListOperationsRequest(states=[_CANCELLED]), metadata=ALICE
            )
            assert [o.operation_id for o in cancelled.operations] == ids[1:3]

    store.run(scenario)


def test_garbled_or_foreign_page_token_is_invalid_argument(store: Store) -> None:
    """§7: a page token not issued to this principal is PAGE_TOKEN_INVALID."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            stub = h.stub()
            for n in range(3):
                await stub.SubmitTurn(submit_request(f"k{n}"), metadata=ALICE)
            first = await stub.ListOperations(
                coordinator_pb2.ListOperationsRequest(page_size=1), metadata=ALICE
            )
            good = first.next_page_token
            assert good
            flipped = good[:-2] + ("A" if good[-2] != "A" else "B") + good[-1]
            for token in ["garbage!!", good[:-3], flipped, "x" * 5000]:
                error = await typed_error(
                    stub.ListOperations(
                        coordinator_pb2.ListOperationsRequest(page_token=token), metadata=ALICE
                    )
                )
                assert error.code == grpc.StatusCode.INVALID_ARGUMENT, token
                assert error.reason == "PAGE_TOKEN_INVALID", token
            foreign = await typed_error(
                stub.ListOperations(
                    coordinator_pb2.ListOperationsRequest(page_token=good), metadata=BOB
                )
            )
            assert foreign.reason == "PAGE_TOKEN_INVALID"

    store.run(scenario)


def test_list_with_unspecified_state_filter_is_argument_invalid(store: Store) -> None:
    """§7: a state filter naming UNSPECIFIED is INVALID_ARGUMENT / ARGUMENT_INVALID."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            error = await typed_error(
                h.stub().ListOperations(
                    coordinator_pb2.ListOperationsRequest(
                        states=[coordinator_pb2.OPERATION_STATE_UNSPECIFIED]
                    ),
                    metadata=ALICE,
                )
            )
            assert error.code == grpc.StatusCode.INVALID_ARGUMENT
            assert error.reason == "ARGUMENT_INVALID"
            assert error.metadata == {"field": "states"}

    store.run(scenario)


def test_empty_operation_id_is_argument_invalid(store: Store) -> None:
    """§7: GetOperation without an id is INVALID_ARGUMENT / ARGUMENT_INVALID."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal) as h:
            error = await typed_error(
                h.stub().GetOperation(coordinator_pb2.GetOperationRequest(), metadata=ALICE)
            )
            assert error.code == grpc.StatusCode.INVALID_ARGUMENT
            assert error.reason == "ARGUMENT_INVALID"

    store.run(scenario)


def test_reads_fail_closed_when_the_journal_is_unavailable() -> None:
    """Fail closed: Get/List/Cancel/Watch on a down journal -> UNAVAILABLE JOURNAL_UNAVAILABLE."""

    async def scenario() -> None:
        journal = FakeJournal()
        async with serving(journal) as h:
            stub = h.stub()
            op_id = (await stub.SubmitTurn(submit_request(), metadata=ALICE)).operation.operation_id
            journal.set_available(False)
            calls = [
                stub.GetOperation(
                    coordinator_pb2.GetOperationRequest(operation_id=op_id), metadata=ALICE
                ),
                stub.ListOperations(coordinator_pb2.ListOperationsRequest(), metadata=ALICE),
                stub.CancelOperation(
                    coordinator_pb2.CancelOperationRequest(operation_id=op_id), metadata=ALICE
                ),
                stub.WatchOperation(
                    coordinator_pb2.WatchOperationRequest(operation_id=op_id), metadata=ALICE
                ).read(),
            ]
            for call in calls:
                error = await typed_error(call)
                assert error.code == grpc.StatusCode.UNAVAILABLE
                assert error.reason == "JOURNAL_UNAVAILABLE"
            journal.set_available(True)
            record = await journal.get(op_id)
            assert record is not None and record.state is OpState.QUEUED

    asyncio.run(scenario())
