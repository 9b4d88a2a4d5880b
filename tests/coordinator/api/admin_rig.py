"""The admin tests' deployment: real echo runners and a real coordinator on 127.0.0.1:0.

turnwire.testing's in-process Stack: runners are real gRPC servers with real
stores; the coordinator runs on a real journal (a SQLite file by default, or a
PostgreSQL URL). An UNKNOWN turn is made the way the dispatcher tests make
one: the Dispatch reply is lost (fault interceptor) and the runner then stays unreachable until the
reconcile deadline (C8), so the turn ends TIMED_OUT, UNKNOWN.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from coordinator_svc.api.auth import Scope
from coordinator_svc.app import RunningCoordinator
from coordinator_svc.config import CoordinatorConfig, DispatchTimings
from runner_svc.app import RunningRunner
from tests.coordinator.api.harness import bearer, submit_request
from tests.support import runner_access
from tests.support.fault_interceptor import DROP_RESPONSE, Fault, FaultInterceptor
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    coordinator_pb2,
    coordinator_pb2_grpc,
)
from turnwire.testing.stack import COORDINATOR, Stack

STEP = 10.0  # seconds any one call may take
UNREACHABLE = (
    "GetOperationStatus",
    "BatchGetOperationStatus",
    "WatchOperations",
    "GetRunnerInfo",
    "Cancel",
)
Q = coordinator_pb2
A = admin_pb2


def lose_dispatch_reply_then_unreachable() -> FaultInterceptor:
    """The first Dispatch runs on the runner but its reply is lost; after that the
    runner answers nothing (status, watch, cancel) until ``unblock()``."""
    faults = FaultInterceptor()
    faults.faults.append(
        Fault("Dispatch", DROP_RESPONSE, on_fire=lambda: faults.block(*UNREACHABLE))
    )
    return faults


@dataclass
class Deployment:
    """Runners + a coordinator on one journal (turnwire.testing's Stack), and stubs for
    two callers."""

    stack: Stack
    tenant_token: str = ""
    admin_token: str = ""
    channel: Any = None

    @property
    def tmp(self) -> Path:
        return self.stack.directory

    @property
    def journal_url(self) -> str:
        return self.stack.journal_url

    @property
    def runners(self) -> dict[str, RunningRunner]:
        return self.stack.runners

    @property
    def coordinator(self) -> RunningCoordinator | None:
        return self.stack.coordinators.get(COORDINATOR)

    @property
    def tenant(self) -> tuple[tuple[str, str], ...]:
        return bearer(self.tenant_token)

    @property
    def admin_md(self) -> tuple[tuple[str, str], ...]:
        return bearer(self.admin_token)

    @property
    def turns(self) -> Any:
        return coordinator_pb2_grpc.TurnServiceStub(self.channel)

    @property
    def admin(self) -> Any:
        return admin_pb2_grpc.AdminServiceStub(self.channel)

    def config(self, **fields: Any) -> CoordinatorConfig:
        """A coordinator on this journal, serving every runner started so far."""
        timings = DispatchTimings(preflight_timeout=0.5, backoff_initial=0.05, idle_poll=0.2)
        return self.stack.coordinator_config(**({"timings": timings} | fields))

    async def start_runner(self, name: str) -> RunningRunner:
        """An echo runner ``name``; coordinators started from now on are sent to it."""
        return await self.stack.start_runner(name, drain_seconds=0.5)

    async def start_coordinator(
        self, *, interceptors: Sequence[grpc.aio.ClientInterceptor] = (), **fields: Any
    ) -> RunningCoordinator:
        config = self.config(**fields)
        coordinator = await self.stack.start_coordinator(config, interceptors=interceptors)
        if self.channel is not None:
            await self.channel.close()
        self.channel = grpc.aio.insecure_channel(coordinator.address)
        return coordinator

    async def stop_coordinator(self) -> None:
        await self.stack.stop_coordinator(grace=0.5)

    async def submit(self, key: str) -> Q.Operation:
        reply = await self.turns.SubmitTurn(submit_request(key), metadata=self.tenant, timeout=STEP)
        return reply.operation

    async def get(self, op_id: str) -> Q.Operation:
        reply = await self.turns.GetOperation(
            Q.GetOperationRequest(operation_id=op_id), metadata=self.tenant, timeout=STEP
        )
        return reply.operation

    async def until(
        self, op_id: str, done: Callable[[Q.Operation], bool], seconds: float = 15.0
    ) -> Q.Operation:
        for _ in range(int(seconds / 0.05)):  # bounded
            operation = await self.get(op_id)
            if done(operation):
                return operation
            await asyncio.sleep(0.05)
        raise AssertionError(f"{op_id} never got there: {operation}")

    async def terminal(self, op_id: str) -> Q.Operation:
        return await self.until(op_id, lambda op: op.finished_at.seconds > 0)

    async def describe(self, op_id: str) -> A.OperationEvidence:
        reply = await self.admin.DescribeOperation(
            A.DescribeOperationRequest(operation_id=op_id), metadata=self.admin_md, timeout=STEP
        )
        return reply.evidence


@asynccontextmanager
async def deployment(
    tmp_path: Path, runners: tuple[str, ...] = ("r1",), journal_url: str = ""
) -> AsyncIterator[Deployment]:
    async with Stack(tmp_path, journal_url=journal_url, secret=runner_access.SECRET) as stack:
        stack.migrate()  # before any coordinator: a test may start its own on rig.config()
        rig = Deployment(stack)
        rig.tenant_token = stack.add_token("alice")
        rig.admin_token = stack.add_token("ops", scopes=[Scope.ADMIN])
        try:
            for name in runners:
                await rig.start_runner(name)
            yield rig
        finally:
            if rig.channel is not None:
                await rig.channel.close()


async def unknown_turn(rig: Deployment, key: str = "ambiguous") -> Q.Operation:
    """A turn that ends TIMED_OUT with execution UNKNOWN (C7, C8), as described above."""
    faults = lose_dispatch_reply_then_unreachable()
    timings = DispatchTimings(
        preflight_timeout=0.3,
        backoff_initial=0.05,
        backoff_max=0.2,
        idle_poll=0.1,
        reconcile_deadline=1.0,
    )
    await rig.start_coordinator(interceptors=faults.all(), timings=timings)
    op = await rig.submit(key)
    ended = await rig.terminal(op.operation_id)
    assert ended.state == Q.OPERATION_STATE_TIMED_OUT, ended
    assert ended.execution == turn_pb2.EXECUTION_UNKNOWN, ended
    faults.unblock()
    return ended
