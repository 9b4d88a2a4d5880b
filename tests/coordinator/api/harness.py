"""A real TurnService on 127.0.0.1:0 over real channels, for the API tests.

The journal is a real adapter (FakeJournal or SqlJournal on a tmp SQLite
file, PostgreSQL when available). The dispatcher is replaced by
``FakeDispatch``, a small implementation of the ``DispatchControl`` port, so
these tests pin the API's behaviour without depending on dispatch timing.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import grpc

from coordinator_svc.api.auth import Authenticator, TokenEntry, token_digest
from coordinator_svc.api.servicer import SERVICE_NAME, TurnServicer, add_to_server
from coordinator_svc.core.model import (
    AttemptRecord,
    Change,
    EventRecord,
    Execution,
    OperationRecord,
    OpState,
    StopReason,
    TurnKind,
)
from coordinator_svc.core.quotas import Occupancy, QuotaRefusal, Quotas
from coordinator_svc.core.routing import NoRunnerForExecutor
from coordinator_svc.feed import ChangeFeed
from coordinator_svc.ports import Journal, Submit
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from turnwire.errors import TypedError, error_info
from turnwire.serving import RunningServer, start_server

ALICE_TOKEN = "tw_alice-test-token"
BOB_TOKEN = "tw_bob-test-token"
MAX_MESSAGE = 4 * 1024 * 1024 + 64 * 1024


def sql_available() -> bool:
    try:
        return importlib.util.find_spec("coordinator_svc.storage.sql") is not None
    except ImportError:
        return False


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


ALICE = bearer(ALICE_TOKEN)
BOB = bearer(BOB_TOKEN)


def now() -> datetime:
    return datetime.now(UTC)


def turn(**fields: Any) -> coordinator_pb2.Turn:
    """A valid writable turn; override what a test pins."""
    values: dict[str, Any] = {
        "model": turn_pb2.ModelRef(provider="builtin", name="echo", parameters={"a": "1"}),
        "input_items": [turn_pb2.InputItem(item_id="i1", role="user", content=b"hello")],
        "item_metadata": {"b": "2", "a": "1"},
        "kind": turn_pb2.TURN_KIND_WRITABLE,
    }
    values.update(fields)
    return coordinator_pb2.Turn(**values)


def submit_request(key: str = "key-1", **turn_fields: Any) -> coordinator_pb2.SubmitTurnRequest:
    return coordinator_pb2.SubmitTurnRequest(idempotency_key=key, turn=turn(**turn_fields))


@dataclass
class FakeDispatch:
    """DispatchControl for API tests: serves the given pools, cancels QUEUED at
    once, and checks the real quotas (``core.quotas``) against what it accepted."""

    journal: Journal
    pools: frozenset[str] = frozenset({"default"})
    woken: list[str] = field(default_factory=list)
    quotas: Quotas = field(default_factory=Quotas)
    occupancy: Occupancy = field(default_factory=Occupancy)
    clock: Callable[[], float] = time.monotonic

    async def store_accepted(
        self, record: OperationRecord, event: EventRecord, submit: Submit
    ) -> tuple[OperationRecord, bool]:
        return await submit(record, event)

    def accepted(self, record: OperationRecord) -> None:
        self.woken.append(record.operation_id)
        self.occupancy.note(record.operation_id, record.principal, record.state)

    def quota_check(self, principal: str) -> QuotaRefusal | None:
        return self.quotas.admit(
            principal,
            self.clock(),
            queued=self.occupancy.queued[principal],
            in_flight=self.occupancy.in_flight[principal],
        )

    def quota_refund(self, principal: str) -> None:
        self.quotas.refund(principal)

    def waiting_for(self, record: OperationRecord) -> str:
        return "" if record.state.terminal else "waiting (FakeDispatch)"

    def has_runner_for(self, pool: str, kind: TurnKind) -> bool:
        del kind
        return pool in self.pools

    def executor_refusal(
        self, pool: str, kind: TurnKind, executor: str
    ) -> NoRunnerForExecutor | None:
        del pool, kind, executor
        return None  # the fake's runners have said nothing: nothing is proven (C6b)

    async def request_cancel(self, record: OperationRecord) -> OperationRecord:
        at = now()
        after = dataclasses.replace(record, cancel_requested=True, updated_at=at)
        event = None
        if record.state is OpState.QUEUED:
            after = dataclasses.replace(
                after,
                state=OpState.CANCELLED,
                stop_reason=StopReason.CANCEL,
                error_reason="CANCELLED",
                error_message="cancelled by its principal",
                finished_at=at,
            )
            event = EventRecord(
                record.operation_id,
                0,
                OpState.QUEUED,
                OpState.CANCELLED,
                record.execution,
                at,
                reason="CANCELLED",
            )
        stored = await self.journal.commit(Change(before=record, after=after, event=event))
        self.occupancy.note(stored.operation_id, stored.principal, stored.state)
        return stored


@dataclass
class Harness:
    journal: Journal
    dispatch: Any
    feed: ChangeFeed
    servicer: TurnServicer
    server: RunningServer
    channels: list[grpc.aio.Channel]

    def stub(self) -> Any:
        """A TurnService stub on a channel of its own."""
        channel = grpc.aio.insecure_channel(
            self.server.address,
            options=(("grpc.max_send_message_length", MAX_MESSAGE),),
        )
        self.channels.append(channel)
        return coordinator_pb2_grpc.TurnServiceStub(channel)


@asynccontextmanager
async def serving(
    journal: Journal,
    *,
    dispatch: Any = None,
    default_max_attempts: int = 5,
    make_dispatch: Callable[[Journal], Any] | None = None,
    reread_on_poll: Callable[[str], None] | None = None,
) -> AsyncIterator[Harness]:
    feed = ChangeFeed()
    control = dispatch or (make_dispatch or FakeDispatch)(journal)
    auth = Authenticator(
        [TokenEntry("alice", token_digest(ALICE_TOKEN)), TokenEntry("bob", token_digest(BOB_TOKEN))]
    )
    servicer = TurnServicer(
        journal=journal,
        dispatch=control,
        feed=feed,
        authenticator=auth,
        default_max_attempts=default_max_attempts,
        watch_poll_seconds=0.2,
        reread_on_poll=reread_on_poll,
    )
    server = await start_server(
        "127.0.0.1:0",
        lambda s: add_to_server(servicer, s),
        [SERVICE_NAME],
        options=(("grpc.max_receive_message_length", MAX_MESSAGE),),
    )
    harness = Harness(journal, control, feed, servicer, server, [])
    try:
        yield harness
    finally:
        servicer.close()
        for channel in harness.channels:
            await channel.close()
        await server.stop(None)


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    """Await ``call`` and return the RpcError it must raise."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc
    raise AssertionError("the call succeeded but an error was expected")


async def typed_error(call: Any) -> TypedError:
    error = await rpc_error(call)
    info = error_info(error)
    assert info is not None, f"untyped error: {error.code()} {error.details()}"
    return info


async def advance(
    journal: Journal,
    operation_id: str,
    to_state: OpState,
    *,
    attempt: bool = False,
    **fields: Any,
) -> OperationRecord:
    """Commit one state change directly (no dispatcher), as another writer would."""
    before = await journal.get(operation_id)
    assert before is not None
    at = now()
    execution = fields.get("execution", before.execution)
    new_attempt = None
    count = before.attempt_count
    if attempt:
        count += 1
        new_attempt = AttemptRecord(operation_id, count, "r1", "a" * 32, None, at)
        fields.setdefault("runner", "r1")
        fields.setdefault("incarnation_id", "a" * 32)
        fields.setdefault("last_attempt_at", at)
    if to_state.terminal:
        fields.setdefault("finished_at", at)
    after = dataclasses.replace(
        before, state=to_state, attempt_count=count, updated_at=at, **fields
    )
    event = EventRecord(operation_id, 0, before.state, to_state, execution, at)
    return await journal.commit(
        Change(before=before, after=after, event=event, new_attempt=new_attempt)
    )


async def run_to_success(journal: Journal, operation_id: str) -> OperationRecord:
    """QUEUED -> DISPATCHING -> RUNNING -> SUCCEEDED with a result."""
    await advance(journal, operation_id, OpState.DISPATCHING, attempt=True)
    await advance(journal, operation_id, OpState.RUNNING, execution=Execution.STARTED)
    result = turn_pb2.TurnResult(output=b"done", content_type="text/plain")
    return await advance(
        journal, operation_id, OpState.SUCCEEDED, result=result.SerializeToString()
    )
