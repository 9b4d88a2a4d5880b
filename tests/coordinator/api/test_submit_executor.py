"""C6b at submit: a turn naming an executor no runner serves (as proven by what
every runner of its pool and kind said) is refused FAILED_PRECONDITION /
NO_RUNNER_FOR_EXECUTOR, nothing stored; a replay of a key accepted earlier is
still answered with its operation (C1). Real server on 127.0.0.1:0, real
channels, the in-memory and the SQLite journal."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc
import pytest

from coordinator_svc.core.model import TurnKind
from coordinator_svc.core.routing import NoRunnerForExecutor
from coordinator_svc.ports import Journal
from tests.coordinator.api.conftest import Store
from tests.coordinator.api.harness import (
    ALICE,
    FakeDispatch,
    serving,
    submit_request,
    typed_error,
)
from turnwire.coordinator.v1 import coordinator_pb2

pytestmark = pytest.mark.timeout(60)


@dataclass
class ServedDispatch(FakeDispatch):
    """FakeDispatch whose runners have said they serve ``served`` (None: not said)."""

    served: tuple[str, ...] | None = ("alpha",)

    def executor_refusal(
        self, pool: str, kind: TurnKind, executor: str
    ) -> NoRunnerForExecutor | None:
        del pool, kind
        if self.served is None or executor in self.served:
            return None
        return NoRunnerForExecutor(executor, self.served)


@pytest.mark.rule("C6b")
def test_submit_names_an_executor_no_runner_serves_and_nothing_is_stored(store: Store) -> None:
    """C6b: FAILED_PRECONDITION / NO_RUNNER_FOR_EXECUTOR with ``executor`` and
    ``served``; no commit; the same key with a served executor is then new."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal, make_dispatch=ServedDispatch) as h:
            stub = h.stub()
            error = await typed_error(
                stub.SubmitTurn(submit_request("k", executor="gamma"), metadata=ALICE)
            )
            assert error.code == grpc.StatusCode.FAILED_PRECONDITION
            assert error.reason == "NO_RUNNER_FOR_EXECUTOR"
            assert error.metadata == {"executor": "gamma", "served": "alpha"}
            assert "'gamma'" in error.message
            assert journal.commits == 0 and h.dispatch.woken == []
            made = await stub.SubmitTurn(submit_request("k", executor="alpha"), metadata=ALICE)
            assert made.replayed is False and h.dispatch.woken == [made.operation.operation_id]

    store.run(scenario)


@pytest.mark.rule("C6b")
def test_submit_and_watch_refuses_it_the_same_way_before_any_message(store: Store) -> None:
    """C6b: SubmitAndWatch gives SubmitTurn's own refusal, nothing stored."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal, make_dispatch=ServedDispatch) as h:
            request = coordinator_pb2.SubmitAndWatchRequest(
                submit=submit_request("w", executor="gamma")
            )
            call = h.stub().SubmitAndWatch(request, metadata=ALICE)
            error = await typed_error(asyncio.wait_for(call.read(), 10))
            assert error.reason == "NO_RUNNER_FOR_EXECUTOR"
            assert error.metadata == {"executor": "gamma", "served": "alpha"}
            assert journal.commits == 0

    store.run(scenario)


@pytest.mark.rule("C1", "C6b")
def test_a_replay_of_a_turn_accepted_before_is_answered_though_it_would_be_refused_now(
    store: Store,
) -> None:
    """C1 over C6b: a turn accepted while a runner had not said what it serves is
    answered as a replay under its key after the runners said none serves it;
    another request under that key is IDEMPOTENCY_KEY_REUSED. Nothing stored."""

    async def scenario(journal: Journal) -> None:
        async with serving(journal, make_dispatch=ServedDispatch) as h:
            stub = h.stub()
            h.dispatch.served = None  # not said yet: nothing is proven, accepted
            first = await stub.SubmitTurn(submit_request("r", executor="gamma"), metadata=ALICE)
            commits = journal.commits
            h.dispatch.served = ("alpha",)  # now proven: no runner serves gamma
            again = await stub.SubmitTurn(submit_request("r", executor="gamma"), metadata=ALICE)
            assert again.replayed is True
            assert again.operation.operation_id == first.operation.operation_id
            other = await typed_error(
                stub.SubmitTurn(submit_request("r", executor="delta"), metadata=ALICE)
            )
            assert other.reason == "IDEMPOTENCY_KEY_REUSED"
            assert journal.commits == commits

    store.run(scenario)
