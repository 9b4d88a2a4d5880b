"""One runner, seen from the coordinator: a grpc.aio channel and its calls.

Every call has a deadline from ``DispatchTimings``. Replies become core
events. Only a typed error (``turnwire.errors.error_info``) with a reason the
contract names as definite is a refusal (C6); every other failure, including
a reply the contract does not allow, is "unknown" (C7).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import grpc

from coordinator_svc.config import DispatchTimings, RunnerEndpoint
from coordinator_svc.core import commands
from coordinator_svc.core.decide_dispatch import (
    CANCELLED_BEFORE_DISPATCH,
    DEFINITE_REFUSALS,
    ENVELOPE_INVALID,
    ENVELOPE_MISMATCH,
    MESSAGE_TOO_LARGE,
)
from coordinator_svc.core.events import (
    CancelAnswered,
    CancelFailed,
    DispatchAccepted,
    DispatchRefused,
    DispatchUnknown,
    PreflightAnswer,
    PreflightFailed,
)
from coordinator_svc.core.model import OperationRecord
from coordinator_svc.dispatcher.metrics import DispatcherMetrics
from coordinator_svc.dispatcher.translate import (
    RunnerContractViolation,
    runner_executors,
    runner_op,
    slot_sizes,
    store_opens,
)
from coordinator_svc.ports import OutputCall, RunnerInfo, WatchCall
from turnwire.errors import error_info
from turnwire.limits import MessageLimits
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.secure_channels import runner_aio_channel
from turnwire.transport_security import RunnerCredentials

log = logging.getLogger("coordinator_svc.dispatcher")

DISPATCH_REFUSALS = DEFINITE_REFUSALS | {
    ENVELOPE_MISMATCH,
    ENVELOPE_INVALID,
    CANCELLED_BEFORE_DISPATCH,
}
# A watch stream is re-opened (from its cursor) at least this often, so the
# call has a deadline like every other one.
WATCH_WINDOW_SECONDS = 60.0
# The same for a relayed output stream (§12): a long turn's is reopened from its offset.
OUTPUT_WINDOW_SECONDS = 300.0


# gRPC's words when a receiver's max_receive_message_length refuses a message.
_TOO_LARGE = re.compile(r"(?<!CLIENT: )Received message larger than max \((\d+) vs\. \d+\)")


def refused_as_too_large(error: grpc.aio.AioRpcError, request_size: int) -> bool:
    """C6: the runner's gRPC refused this very Dispatch as too large.

    gRPC checks a message against the receiver's limit while receiving it and
    fails the call (RESOURCE_EXHAUSTED) before any handler sees the request:
    a unary handler only ever runs with the whole message decoded. So the
    runner never saw it, and never will (the bytes never change). Definite
    only when the refusal names exactly our request's size and does not come
    from this side (our own receive limit is off, so it cannot: see __init__).
    Any other RESOURCE_EXHAUSTED stays unknown (C7).
    """
    if error.code() is not grpc.StatusCode.RESOURCE_EXHAUSTED:
        return False
    found = _TOO_LARGE.search(error.details() or "")
    return found is not None and int(found.group(1)) == request_size


def describe(error: BaseException) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return f"{type(error).__name__}: {error}"


class RunnerClient:
    """The calls the dispatcher makes to one runner."""

    def __init__(
        self,
        endpoint: RunnerEndpoint,
        timings: DispatchTimings,
        metrics: DispatcherMetrics,
        credentials: RunnerCredentials,
        interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
        limits: MessageLimits | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._timings = timings
        self._metrics = metrics
        self._limits = limits or MessageLimits()
        # Issue 11: the runner serves only its coordinator. With mutual TLS the
        # channel carries who we are; in plaintext each call carries the secret
        # (passed per call, not by an interceptor: no extra hop on the hot path).
        self._metadata = credentials.call_metadata or None
        self._channel = runner_aio_channel(
            credentials,
            endpoint.address,
            interceptors=interceptors,
            attach_secret=False,
            options=(
                # C6 needs every Dispatch delivered at most once: no retries of any
                # kind on this channel (PROTOCOL.md, "Transport assumption").
                ("grpc.enable_retries", 0),
                # Message limits (turnwire.limits): nothing bigger than the runners
                # receive is sent (dispatch() checks first; this is the backstop),
                # and no reply is refused here, so a "received message larger than
                # max" can only come from the runner's side (dispatch()).
                ("grpc.max_send_message_length", self._limits.dispatch_max_send_bytes),
                ("grpc.max_receive_message_length", -1),
            ),
        )
        self._stub = runner_pb2_grpc.RunnerServiceStub(self._channel)

    @property
    def name(self) -> str:
        return self.endpoint.name

    async def close(self, grace: float | None = None) -> None:
        """Close the channel; with ``grace``, calls in flight get that long to end first."""
        await self._channel.close(grace=grace)

    async def statuses(
        self, asked: Sequence[tuple[str, int]]
    ) -> list[PreflightAnswer | PreflightFailed]:
        """Preflight (C2) for (operation_id, asked_attempt) pairs: one call."""
        try:
            if len(asked) == 1:
                return [await self._status_one(*asked[0])]
            return await self._status_batch(asked)
        except (grpc.aio.AioRpcError, RunnerContractViolation) as error:
            detail = describe(error)
            return [PreflightFailed(self.name, detail, attempt) for _, attempt in asked]

    async def _status_one(self, operation_id: str, attempt: int) -> PreflightAnswer:
        self._metrics.rpc_calls["GetOperationStatus"] += 1
        reply = await self._stub.GetOperationStatus(
            runner_pb2.GetOperationStatusRequest(operation_id=operation_id),
            timeout=self._timings.preflight_timeout,
            metadata=self._metadata,
        )
        op = runner_op(reply.operation) if reply.present else None
        return PreflightAnswer(
            self.name,
            reply.incarnation_id,
            reply.store_id,
            reply.durable,
            reply.present,
            op,
            attempt,
            store_opens=store_opens(reply.store_opens),
        )

    async def _status_batch(
        self, asked: Sequence[tuple[str, int]]
    ) -> list[PreflightAnswer | PreflightFailed]:
        self._metrics.rpc_calls["BatchGetOperationStatus"] += 1
        reply = await self._stub.BatchGetOperationStatus(
            runner_pb2.BatchGetOperationStatusRequest(operation_ids=[op for op, _ in asked]),
            timeout=self._timings.preflight_timeout,
            metadata=self._metadata,
        )
        entries = {entry.operation_id: entry for entry in reply.entries}
        chain = store_opens(reply.store_opens)
        answers: list[PreflightAnswer | PreflightFailed] = []
        for operation_id, attempt in asked:
            entry = entries.get(operation_id)
            if entry is None:
                answers.append(PreflightFailed(self.name, "missing from batch reply", attempt))
                continue
            op = runner_op(entry.operation) if entry.present else None
            answers.append(
                PreflightAnswer(
                    self.name,
                    reply.incarnation_id,
                    reply.store_id,
                    reply.durable,
                    entry.present,
                    op,
                    attempt,
                    store_opens=chain,
                )
            )
        return answers

    async def dispatch(
        self,
        record: OperationRecord,
        command: commands.Dispatch,
        *,
        reply_hold: float = 0.0,
        releases: Sequence[tuple[str, commands.Release]] = (),
    ) -> DispatchAccepted | DispatchRefused | DispatchUnknown:
        """Send one attempt (C5): the persisted envelope bytes, as they are."""
        request = runner_pb2.DispatchRequest(
            operation_id=record.operation_id,
            envelope=record.envelope,
            envelope_digest=record.envelope_digest,
            expected_incarnation_id=command.incarnation_id,
            fencing_token=command.fencing_token,
            attempt=command.attempt,
            dispatch_stamp=command.dispatch_stamp,
            reply_hold_ms=max(0, round(reply_hold * 1000)),
            releases=[_release_request(op_id, release) for op_id, release in releases],
        )
        size, limit = request.ByteSize(), self._limits.dispatch_max_send_bytes
        if size > limit:
            # Never sent, so certainly not delivered; the same bytes never fit.
            why = f"the Dispatch is {size} bytes; runners receive at most {limit}"
            return DispatchRefused(command.attempt, MESSAGE_TOO_LARGE, "", why)
        self._metrics.rpc_calls["Dispatch"] += 1
        try:
            reply = await self._stub.Dispatch(
                request, timeout=self._timings.dispatch_timeout, metadata=self._metadata
            )
            return DispatchAccepted(
                command.attempt,
                reply.incarnation_id,
                runner_op(reply.operation),
                reply.duplicate,
            )
        except grpc.aio.AioRpcError as error:
            typed = error_info(error)
            if typed is not None and typed.reason in DISPATCH_REFUSALS:
                incarnation = typed.metadata.get("incarnation_id", "")
                return DispatchRefused(
                    command.attempt,
                    typed.reason,
                    incarnation,
                    typed.message,
                    _admission_floor(typed.metadata.get("admission_floor", "")),
                )
            if typed is None and refused_as_too_large(error, size):
                return DispatchRefused(command.attempt, MESSAGE_TOO_LARGE, "", describe(error))
            return DispatchUnknown(command.attempt, describe(error))
        except RunnerContractViolation as error:
            return DispatchUnknown(command.attempt, f"contract violation: {error}")

    async def cancel(
        self, record: OperationRecord, command: commands.Cancel
    ) -> CancelAnswered | CancelFailed:
        self._metrics.rpc_calls["Cancel"] += 1
        request = runner_pb2.CancelRequest(
            operation_id=record.operation_id,
            expected_incarnation_id=command.incarnation_id,
            fencing_token=command.fencing_token,
        )
        try:
            reply = await self._stub.Cancel(
                request, timeout=self._timings.cancel_timeout, metadata=self._metadata
            )
            op = runner_op(reply.operation) if reply.HasField("operation") else None
            return CancelAnswered(self.name, reply.incarnation_id, op, reply.tombstoned)
        except grpc.aio.AioRpcError as error:
            typed = error_info(error)
            if typed is not None:
                incarnation = typed.metadata.get("incarnation_id", "")
                return CancelFailed(self.name, typed.reason, incarnation, typed.message)
            return CancelFailed(self.name, "", detail=describe(error))
        except RunnerContractViolation as error:
            return CancelFailed(self.name, "", detail=f"contract violation: {error}")

    async def release(self, operation_id: str, command: commands.Release) -> bool:
        self._metrics.rpc_calls["Release"] += 1
        request = _release_request(operation_id, command)
        try:
            await self._stub.Release(
                request, timeout=self._timings.release_timeout, metadata=self._metadata
            )
        except grpc.aio.AioRpcError:
            return False
        return True

    async def incarnation(self) -> str:
        """The runner's current incarnation (GetRunnerInfo); raises AioRpcError."""
        return (await self.info()).incarnation_id

    async def info(self) -> RunnerInfo:
        """The runner's incarnation and slot pool sizes (GetRunnerInfo); raises AioRpcError."""
        self._metrics.rpc_calls["GetRunnerInfo"] += 1
        reply = await self._stub.GetRunnerInfo(
            runner_pb2.GetRunnerInfoRequest(),
            timeout=self._timings.preflight_timeout,
            metadata=self._metadata,
        )
        receives = reply.max_receive_message_bytes
        if 0 < receives < self._limits.runner_max_receive_bytes:
            # Misconfigured chain: a Dispatch that fits our limit but not the
            # runner's is refused by its gRPC (a definite refusal, dispatch()).
            log.warning(
                "%s receives at most %d bytes, less than --runner-max-receive-bytes %d: "
                "turns near the limit will be REJECTED",
                self.name,
                receives,
                self._limits.runner_max_receive_bytes,
            )
        return RunnerInfo(
            str(reply.incarnation_id),
            str(reply.store_id),
            slot_sizes(reply.pools),
            version=str(reply.version),
            executors=runner_executors(reply.executors),
        )

    def watch(self, after_sequence: int) -> WatchCall:
        """One WatchOperations stream from ``after_sequence`` (C9)."""
        self._metrics.rpc_calls["WatchOperations"] += 1
        call: WatchCall = self._stub.WatchOperations(
            runner_pb2.WatchOperationsRequest(after_sequence=after_sequence),
            timeout=WATCH_WINDOW_SECONDS,
            metadata=self._metadata,
        )
        return call

    def stream_output(self, operation_id: str, after_offset: int) -> OutputCall:
        """One StreamOutput stream of ``operation_id`` after ``after_offset`` (R13), for
        the output relay (PROTOCOL.md §12); reopened from its cursor when it ends."""
        self._metrics.rpc_calls["StreamOutput"] += 1
        call: OutputCall = self._stub.StreamOutput(
            runner_pb2.StreamOutputRequest(operation_id=operation_id, after_offset=after_offset),
            timeout=OUTPUT_WINDOW_SECONDS,
            metadata=self._metadata,
        )
        return call


def _release_request(operation_id: str, command: commands.Release) -> runner_pb2.ReleaseRequest:
    """C10: the same request whether it is its own call or carried on a Dispatch."""
    return runner_pb2.ReleaseRequest(
        operation_id=operation_id,
        expected_incarnation_id=command.incarnation_id,
        fencing_token=command.fencing_token,
    )


def _admission_floor(said: str) -> int | None:
    """The floor a DISPATCH_STALE refusal names (C6c), None if absent or not a number
    (it only sharpens the words about clock skew; the refusal is definite anyway)."""
    try:
        return int(said)
    except ValueError:
        return None
