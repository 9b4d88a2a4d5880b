"""The coordinator's dispatcher alone, against real runners and a journal you give it.

``Rig`` stands up runners with turnwire.testing's Stack (runner_svc's
start_runner on 127.0.0.1:0, the metered executor writing a real ledger) and
builds a ``coordinator_svc.dispatcher.Dispatcher`` on the journal it is given
(FakeJournal, or the SQL journal on a SQLite file: ``sqlite_journal``), with
no API in front: the dispatcher's own tests (tests/coordinator/dispatcher) and
the benchmarks of the scheduler (bench/capacity.py, bench/scheduler.py) drive
it directly.

Operations are put in the journal the way the API does (journal.submit with
the envelope built once, ``new_operation``), then ``dispatcher.wake``. The
runners demand a shared secret (a fresh one per rig unless ``secret`` is
given); ``rig.credentials`` is what a caller presents to call a runner itself.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc

from coordinator_svc.config import DispatchTimings, RunnerEndpoint
from coordinator_svc.core.birth import Birth, born
from coordinator_svc.core.events import RunnerIdentity
from coordinator_svc.core.model import (
    EventRecord,
    OperationRecord,
    OpState,
    ReplayPolicy,
    TurnKind,
)
from coordinator_svc.dispatcher import Dispatcher, utc_now
from coordinator_svc.feed import ChangeFeed
from coordinator_svc.ports import Journal
from coordinator_svc.storage import migrate, open_journal
from runner_svc.app import RunningRunner
from turnwire.common.v1 import turn_pb2
from turnwire.ids import new_operation_id, sha256_hex
from turnwire.ledger import count_starts, read_ledger
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.secure_channels import runner_aio_channel
from turnwire.testing.stack import Stack
from turnwire.transport_security import RunnerCredentials

TIMINGS = DispatchTimings(
    preflight_timeout=2.0,
    dispatch_timeout=3.0,
    cancel_timeout=2.0,
    release_timeout=2.0,
    backoff_initial=0.02,
    backoff_max=0.2,
    reconcile_deadline=20.0,
    idle_poll=0.05,
)
# Per-operation RPC methods (the watch and GetRunnerInfo are per runner).
PER_OPERATION_RPCS = (
    "GetOperationStatus",
    "BatchGetOperationStatus",
    "Dispatch",
    "Cancel",
    "Release",
)
_POLICY = {
    ReplayPolicy.PROBE_FIRST: turn_pb2.REPLAY_POLICY_PROBE_FIRST,
    ReplayPolicy.NEVER_AUTOMATIC: turn_pb2.REPLAY_POLICY_NEVER_AUTOMATIC,
    ReplayPolicy.SAFE: turn_pb2.REPLAY_POLICY_SAFE,
}


def envelope_for(
    operation_id: str, parameters: dict[str, str], policy: ReplayPolicy, principal: str = "alice"
) -> bytes:
    envelope = runner_pb2.TurnEnvelope(
        operation_id=operation_id,
        routing=runner_pb2.Routing(pool="default"),
        model=turn_pb2.ModelRef(provider="test", name="metered", parameters=parameters),
        kind=turn_pb2.TURN_KIND_WRITABLE,
        replay_policy=_POLICY[policy],
        principal=principal,
    )
    return envelope.SerializeToString(deterministic=True)


def new_operation(
    parameters: dict[str, str] | None = None,
    *,
    policy: ReplayPolicy = ReplayPolicy.PROBE_FIRST,
    max_attempts: int = 5,
    now: datetime | None = None,
    principal: str = "alice",
) -> tuple[OperationRecord, EventRecord]:
    """A QUEUED record and its first event, as C1 acceptance builds them."""
    now = now or utc_now()
    op_id = new_operation_id()
    envelope = envelope_for(op_id, parameters or {}, policy, principal)
    birth = Birth(
        operation_id=op_id,
        principal=principal,
        idempotency_key_digest=sha256_hex(op_id.encode()),
        request_digest=sha256_hex(envelope),
        envelope=envelope,
        pool="default",
        kind=TurnKind.WRITABLE,
        replay_policy=policy,
        max_attempts=max_attempts,
    )
    record, event = born(birth, now)
    return record, event


# A runner nobody answers for: the discard port on loopback, where nothing listens.
GHOST = RunnerEndpoint("ghost", "127.0.0.1:9")


def sqlite_journal(path: Path) -> Journal:
    url = f"sqlite:///{path}"
    migrate(url)
    return open_journal(url)


@dataclass
class Rig:
    tmp: Path
    journal: Journal
    interceptors: Sequence[grpc.aio.ClientInterceptor] = ()
    dispatcher: Dispatcher | None = None
    feed: ChangeFeed = field(default_factory=ChangeFeed)
    # The runners' shared secret (default: a fresh one for this rig).
    secret: str | None = None

    def __post_init__(self) -> None:
        # The runners: turnwire.testing's in-process Stack (no coordinator app: the
        # rig builds the Dispatcher itself, on ``journal``).
        self.stack = Stack(self.tmp, secret=self.secret)

    @property
    def credentials(self) -> RunnerCredentials:
        """What the rig's dispatcher presents to its runners, and a caller may too."""
        return self.stack.credentials

    @property
    def runners(self) -> dict[str, RunningRunner]:
        return self.stack.runners

    @property
    def ledger(self) -> Path:
        return self.stack.ledger

    async def start_runner(
        self,
        name: str = "r1",
        *,
        store: str | None = None,
        listen: str = "127.0.0.1:0",
        slots: int = 4,
        **config: Any,
    ) -> RunningRunner:
        """A metered runner on the rig's ledger; ``config``: more RunnerConfig fields."""
        return await self.stack.start_runner(
            name,
            store_path=self.tmp / f"{store or name}.db",
            listen=listen,
            writable_slots=slots,
            executor="metered",
            ledger_path=self.ledger,
            **config,
        )

    async def sized_dispatcher(self, slots: int, **options: Any) -> Dispatcher:
        """One runner r1 with ``slots`` writable slots and a started dispatcher that has
        read its pool sizes (so it routes only to free slots, issue 9)."""
        await self.start_runner(slots=slots)
        dispatcher = self.make_dispatcher(**options)
        await dispatcher.start()
        for _ in range(200):  # bounded: 10 s
            if dispatcher.room.scheduler.known("r1"):
                return dispatcher
            await asyncio.sleep(0.05)
        raise AssertionError("the runner's slot sizes never became known")

    async def watching(self, runner: str = "r1") -> RunnerIdentity:
        """Until the dispatcher's live watch knows who ``runner`` is and it is known
        live (C2a: heard from within --live-within)."""
        assert self.dispatcher is not None
        for _ in range(200):  # bounded: 10 s
            identity = self.dispatcher.fleet.identity_of(runner, utc_now())
            if identity is not None:
                return identity
            await asyncio.sleep(0.05)
        raise AssertionError(f"the watch on {runner} never learned its identity")

    def make_dispatcher(
        self,
        *,
        timings: DispatchTimings = TIMINGS,
        extra: Sequence[RunnerEndpoint] = (),
        status_poll: float | None = None,
        **options: Any,
    ) -> Dispatcher:
        endpoints = [RunnerEndpoint(name, r.address) for name, r in self.runners.items()]
        self.dispatcher = Dispatcher(
            self.journal,
            [*endpoints, *extra],
            timings,
            self.feed,
            interceptors=self.interceptors,
            status_poll=status_poll,
            **{"runner_credentials": self.credentials, **options},
        )
        return self.dispatcher

    async def submit(self, parameters: dict[str, str] | None = None, **kwargs: object) -> str:
        record, event = new_operation(parameters, **kwargs)  # type: ignore[arg-type]
        await self.journal.submit(record, event)
        if self.dispatcher is not None:
            self.dispatcher.wake(record.operation_id)
        return record.operation_id

    async def accept(
        self, record: OperationRecord, event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        """Store a new turn as the API does (coordinator_svc.api.acceptance): through
        the dispatcher, which may write its first attempt with it (C1a), then
        schedule it if it was stored QUEUED. Returns (stored, replayed)."""
        assert self.dispatcher is not None
        stored, replayed = await self.dispatcher.store_accepted(record, event, self.journal.submit)
        if not replayed and stored.state is OpState.QUEUED:
            self.dispatcher.accepted(stored)
        return stored, replayed

    async def wait_for(
        self,
        operation_id: str,
        predicate: Callable[[OperationRecord], bool],
        within: float = 15.0,
    ) -> OperationRecord:
        """Poll the journal (bounded) until ``predicate`` holds."""
        loop = asyncio.get_running_loop()
        end = loop.time() + within
        while True:
            record = await self.journal.get(operation_id)
            assert record is not None
            if predicate(record):
                return record
            if loop.time() > end:
                raise AssertionError(f"timed out waiting; last state {record}")
            await asyncio.sleep(0.02)

    async def terminal(self, operation_id: str, within: float = 15.0) -> OperationRecord:
        return await self.wait_for(operation_id, lambda r: r.state.terminal, within)

    def starts(self) -> collections.Counter[str]:
        """Executor starts per operation, from the metered ledger."""
        return count_starts(self.ledger)

    def starts_on(self, incarnation_id: str) -> int:
        return sum(1 for e in read_ledger(self.ledger) if e.incarnation_id == incarnation_id)

    async def runner_row(
        self, name: str, operation_id: str
    ) -> runner_pb2.GetOperationStatusResponse:
        async with runner_aio_channel(self.credentials, self.runners[name].address) as channel:
            stub = runner_pb2_grpc.RunnerServiceStub(channel)
            reply: runner_pb2.GetOperationStatusResponse = await stub.GetOperationStatus(
                runner_pb2.GetOperationStatusRequest(operation_id=operation_id), timeout=2.0
            )
            return reply

    async def close(self) -> None:
        if self.dispatcher is not None:
            await self.dispatcher.stop()
        await self.stack.close()
        await self.journal.close()


def per_operation_rpcs(dispatcher: Dispatcher) -> int:
    return sum(dispatcher.metrics.rpc_calls[m] for m in PER_OPERATION_RPCS)
