"""The RunnerService servicer: wire messages in, service calls, wire messages out.

Every reply carries the incarnation (R1), every refusal is typed (errors.py).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from runner_svc.core.model import RunnerRefusal
from runner_svc.service import DispatchCall, RunnerService
from runner_svc.transport import convert
from runner_svc.transport.errors import abort_refusal
from turnwire.limits import DEFAULT_RUNNER_MAX_RECEIVE_BYTES
from turnwire.observability.logs import turn_context
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc

log = logging.getLogger("runner_svc.transport")

SERVICE_NAME: str = runner_pb2.DESCRIPTOR.services_by_name["RunnerService"].full_name


class RunnerServicer(runner_pb2_grpc.RunnerServiceServicer):
    def __init__(
        self, service: RunnerService, *, max_receive_bytes: int = DEFAULT_RUNNER_MAX_RECEIVE_BYTES
    ) -> None:
        self.service = service
        self._max_receive_bytes = max_receive_bytes
        # Fixed for the incarnation's life: built once, sent with every status.
        self._store_opens = convert.store_opens(service.store.openings)

    @property
    def _incarnation(self) -> str:
        return self.service.incarnation_id

    async def GetOperationStatus(
        self, request: runner_pb2.GetOperationStatusRequest, context: Any
    ) -> runner_pb2.GetOperationStatusResponse:
        try:
            with turn_context(request.operation_id, incarnation=self._incarnation):
                view = await self.service.status(request.operation_id)
        except RunnerRefusal as refusal:
            await abort_refusal(context, refusal, self._incarnation, request.operation_id)
        reply = runner_pb2.GetOperationStatusResponse(
            incarnation_id=self._incarnation,
            store_id=self.service.store.store_id,
            durable=self.service.store.durable,
            present=view is not None,
            store_opens=self._store_opens,
        )
        if view is not None:
            reply.operation.CopyFrom(convert.operation(view))
        return reply

    async def BatchGetOperationStatus(
        self, request: runner_pb2.BatchGetOperationStatusRequest, context: Any
    ) -> runner_pb2.BatchGetOperationStatusResponse:
        try:
            found = await self.service.batch_status(list(request.operation_ids))
        except RunnerRefusal as refusal:
            await abort_refusal(context, refusal, self._incarnation)
        entries = []
        for operation_id, view in found:
            entry = runner_pb2.OperationPresence(
                operation_id=operation_id, present=view is not None
            )
            if view is not None:
                entry.operation.CopyFrom(convert.operation(view))
            entries.append(entry)
        return runner_pb2.BatchGetOperationStatusResponse(
            incarnation_id=self._incarnation,
            store_id=self.service.store.store_id,
            durable=self.service.store.durable,
            entries=entries,
            store_opens=self._store_opens,
        )

    async def Dispatch(
        self, request: runner_pb2.DispatchRequest, context: Any
    ) -> runner_pb2.DispatchResponse:
        call = DispatchCall(
            operation_id=request.operation_id,
            envelope=request.envelope,
            envelope_digest=request.envelope_digest,
            expected_incarnation_id=request.expected_incarnation_id,
            fencing_token=request.fencing_token,
            attempt=request.attempt,
            dispatch_stamp=request.dispatch_stamp,
            reply_hold_seconds=request.reply_hold_ms / 1000,
            releases=tuple(
                (r.operation_id, r.expected_incarnation_id, r.fencing_token)
                for r in request.releases
            ),
        )
        # Every line about this Dispatch, its job included, names the turn.
        with turn_context(
            request.operation_id, attempt=request.attempt, incarnation=self._incarnation
        ):
            try:
                outcome = await self.service.dispatch(call)
            except RunnerRefusal as refusal:
                log.info(
                    "dispatch %s refused (incarnation %s): %s",
                    request.operation_id,
                    self._incarnation,
                    refusal,
                )
                await abort_refusal(context, refusal, self._incarnation, request.operation_id)
        return runner_pb2.DispatchResponse(
            incarnation_id=self._incarnation,
            operation=convert.operation(outcome.view),
            duplicate=outcome.duplicate,
        )

    async def Cancel(
        self, request: runner_pb2.CancelRequest, context: Any
    ) -> runner_pb2.CancelResponse:
        with turn_context(request.operation_id, incarnation=self._incarnation):
            try:
                outcome = await self.service.cancel(
                    request.operation_id, request.expected_incarnation_id, request.fencing_token
                )
            except RunnerRefusal as refusal:
                log.info(
                    "cancel %s refused (incarnation %s): %s",
                    request.operation_id,
                    self._incarnation,
                    refusal,
                )
                await abort_refusal(context, refusal, self._incarnation, request.operation_id)
        return runner_pb2.CancelResponse(
            incarnation_id=self._incarnation,
            operation=convert.operation(outcome.view),
            tombstoned=outcome.tombstoned,
        )

    async def Release(
        self, request: runner_pb2.ReleaseRequest, context: Any
    ) -> runner_pb2.ReleaseResponse:
        try:
            with turn_context(request.operation_id, incarnation=self._incarnation):
                released = await self.service.release(
                    request.operation_id, request.expected_incarnation_id, request.fencing_token
                )
        except RunnerRefusal as refusal:
            await abort_refusal(context, refusal, self._incarnation, request.operation_id)
        return runner_pb2.ReleaseResponse(incarnation_id=self._incarnation, released=released)

    async def GetRunnerInfo(
        self, request: runner_pb2.GetRunnerInfoRequest, context: Any
    ) -> runner_pb2.GetRunnerInfoResponse:
        reply = convert.runner_info(self.service.info())
        reply.max_receive_message_bytes = self._max_receive_bytes
        return reply

    async def StreamOutput(
        self, request: runner_pb2.StreamOutputRequest, context: Any
    ) -> AsyncIterator[runner_pb2.StreamOutputResponse]:
        # No turn_context around the yields: a stream the caller drops is closed
        # from another task, where a context variable's token cannot be reset.
        try:
            items = self.service.stream_output(request.operation_id, request.after_offset)
            async for item in items:
                yield convert.output_item(item, self._incarnation)
        except RunnerRefusal as refusal:
            await abort_refusal(context, refusal, self._incarnation, request.operation_id)

    async def WatchOperations(
        self, request: runner_pb2.WatchOperationsRequest, context: Any
    ) -> AsyncIterator[runner_pb2.WatchOperationsResponse]:
        try:
            async for view in self.service.watch(request.after_sequence):
                # Every message carries the pools as they are now (issue 9): a
                # busy runner may never send a heartbeat.
                reply = runner_pb2.WatchOperationsResponse(
                    incarnation_id=self._incarnation,
                    pools=convert.slot_pools(self.service.pool_use()),
                )
                if view is not None:
                    reply.operation.CopyFrom(convert.operation(view))
                yield reply
        except RunnerRefusal as refusal:
            await abort_refusal(context, refusal, self._incarnation)
