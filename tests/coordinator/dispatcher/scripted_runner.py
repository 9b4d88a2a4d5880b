"""A tiny scripted RunnerService (a real grpc.aio server on 127.0.0.1:0) for
runner misbehaviour a correct runner never shows, e.g. forgetting an
operation it acknowledged (C9). Tests edit ``rows`` to script it."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from turnwire.distribution import version as installed_version
from turnwire.ids import new_incarnation_id, new_store_id
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc

_S = runner_pb2


class ScriptedRunner(runner_pb2_grpc.RunnerServiceServicer):
    def __init__(self) -> None:
        self.incarnation_id = new_incarnation_id()
        self.store_id = new_store_id()
        self.rows: dict[str, runner_pb2.RunnerOperation] = {}
        self.dispatches = 0
        self._server: grpc.aio.Server | None = None
        self.address = ""

    async def start(self) -> str:
        self._server = grpc.aio.server()
        runner_pb2_grpc.add_RunnerServiceServicer_to_server(self, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        self.address = f"127.0.0.1:{port}"
        return self.address

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)

    def _presence(self, operation_id: str) -> _S.OperationPresence:
        row = self.rows.get(operation_id)
        entry = _S.OperationPresence(operation_id=operation_id, present=row is not None)
        if row is not None:
            entry.operation.CopyFrom(row)
        return entry

    async def GetOperationStatus(self, request: Any, context: Any) -> Any:
        entry = self._presence(request.operation_id)
        reply = _S.GetOperationStatusResponse(
            incarnation_id=self.incarnation_id,
            store_id=self.store_id,
            durable=False,
            present=entry.present,
        )
        if entry.present:
            reply.operation.CopyFrom(entry.operation)
        return reply

    async def BatchGetOperationStatus(self, request: Any, context: Any) -> Any:
        return _S.BatchGetOperationStatusResponse(
            incarnation_id=self.incarnation_id,
            store_id=self.store_id,
            durable=False,
            entries=[self._presence(op) for op in request.operation_ids],
        )

    async def Dispatch(self, request: Any, context: Any) -> Any:
        self.dispatches += 1
        row = self.rows.setdefault(
            request.operation_id,
            _S.RunnerOperation(
                operation_id=request.operation_id,
                state=_S.RUNNER_OPERATION_STATE_ACCEPTED,
                incarnation_id=self.incarnation_id,
                envelope_digest=request.envelope_digest,
                attempt=request.attempt,
            ),
        )
        return _S.DispatchResponse(incarnation_id=self.incarnation_id, operation=row)

    async def Release(self, request: Any, context: Any) -> Any:
        return _S.ReleaseResponse(incarnation_id=self.incarnation_id, released=True)

    async def GetRunnerInfo(self, request: Any, context: Any) -> Any:
        return _S.GetRunnerInfoResponse(
            incarnation_id=self.incarnation_id,
            store_id=self.store_id,
            accepting=True,
            version=installed_version(),  # as every runner reports it
        )

    async def WatchOperations(self, request: Any, context: Any) -> Any:
        # Reports nothing: the fallback status poll must find out by itself.
        await asyncio.sleep(3600)
        yield _S.WatchOperationsResponse(incarnation_id=self.incarnation_id)
