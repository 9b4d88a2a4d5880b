"""A tiny scripted RunnerService upstream for the fault tool tests.

It counts what actually ARRIVES (so a test can tell a dropped request from a
dropped response), refuses chosen operation ids with a typed ErrorInfo, and
streams a fixed number of WatchOperations changes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

from turnwire import errors
from turnwire.common.v1 import errors_pb2
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.serving import start_server

INCARNATION = "0123456789abcdef0123456789abcdef"
RUNNER_SERVICE = runner_pb2.DESCRIPTOR.services_by_name["RunnerService"].full_name
DISPATCH = f"/{RUNNER_SERVICE}/Dispatch"


@dataclass
class ScriptedRunner(runner_pb2_grpc.RunnerServiceServicer):
    """Records arrivals; refuses ids in ``refuse`` with INCARNATION_MISMATCH."""

    refuse: set[str] = field(default_factory=set)
    watch_messages: int = 3
    dispatched: list[str] = field(default_factory=list)
    status_asked: list[str] = field(default_factory=list)
    seen_metadata: list[dict[str, Any]] = field(default_factory=list)
    seen_time_remaining: list[float | None] = field(default_factory=list)

    async def Dispatch(self, request: runner_pb2.DispatchRequest, context: Any) -> Any:
        self.dispatched.append(request.operation_id)
        self.seen_metadata.append(dict(context.invocation_metadata()))
        self.seen_time_remaining.append(context.time_remaining())
        if request.operation_id in self.refuse:
            await errors.abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                errors_pb2.ERROR_REASON_INCARNATION_MISMATCH,
                "expected another incarnation",
                incarnation_id=INCARNATION,
            )
        await context.send_initial_metadata((("x-runner-initial", "hello"),))
        context.set_trailing_metadata((("x-runner-trailing", "bye"), ("x-bin", b"\x00\x01")))
        return runner_pb2.DispatchResponse(
            incarnation_id=INCARNATION,
            operation=runner_pb2.RunnerOperation(
                operation_id=request.operation_id,
                state=runner_pb2.RUNNER_OPERATION_STATE_ACCEPTED,
            ),
        )

    async def GetOperationStatus(
        self, request: runner_pb2.GetOperationStatusRequest, context: Any
    ) -> Any:
        self.status_asked.append(request.operation_id)
        return runner_pb2.GetOperationStatusResponse(incarnation_id=INCARNATION, present=False)

    async def WatchOperations(
        self, request: runner_pb2.WatchOperationsRequest, context: Any
    ) -> AsyncIterator[runner_pb2.WatchOperationsResponse]:
        for index in range(self.watch_messages):
            yield runner_pb2.WatchOperationsResponse(
                incarnation_id=INCARNATION,
                operation=runner_pb2.RunnerOperation(
                    operation_id=f"op-{index}", sequence=request.after_sequence + index + 1
                ),
            )


@asynccontextmanager
async def scripted_upstream(
    runner: ScriptedRunner | None = None, listen: str = "127.0.0.1:0"
) -> AsyncIterator[tuple[ScriptedRunner, str]]:
    """A real grpc.aio RunnerService on ``listen`` (default 127.0.0.1:<free>)."""
    servicer = runner if runner is not None else ScriptedRunner()
    server = await start_server(
        listen,
        lambda s: runner_pb2_grpc.add_RunnerServiceServicer_to_server(servicer, s),
        (RUNNER_SERVICE,),
    )
    try:
        yield servicer, server.address
    finally:
        await server.stop(None)


def dispatch_request(operation_id: str) -> runner_pb2.DispatchRequest:
    return runner_pb2.DispatchRequest(
        operation_id=operation_id,
        envelope=b"envelope",
        envelope_digest="d" * 64,
        expected_incarnation_id=INCARNATION,
        fencing_token=1,
        attempt=1,
    )


async def call_dispatch(
    stub: runner_pb2_grpc.RunnerServiceStub, operation_id: str, deadline_s: float = 5.0
) -> grpc.StatusCode:
    """Dispatch once; the status code the caller saw."""
    try:
        await stub.Dispatch(dispatch_request(operation_id), timeout=deadline_s)
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK
