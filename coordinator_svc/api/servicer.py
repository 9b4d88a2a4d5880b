"""The public TurnService over grpc.aio (PROTOCOL.md §7).

Every handler first authenticates (the principal comes from the bearer token,
never from the body), then reads or writes the journal, and turns any failure
into a typed status through the one table in ``api.errors``.

Tenant isolation: every read goes through ``journal.get_for_principal`` /
``list_for_principal``, and "not yours" raises the very same ApiError as "no
such id" (same code, message, reason, metadata), so no response reveals
another principal's operation (§8 item 8).

WatchOperation reads the journal's event log in pages after the client's
cursor and, when it has caught up, waits on the in-process change feed with a
bounded timeout, so changes committed by other replicas are seen too. Each
streamed event carries the operation as last read from the journal (its
``last_event_sequence`` is at least the event's sequence: never older than
the event). The stream ends after the terminal event; a client reconnecting
with the last sequence it saw misses nothing.

SubmitAndWatch is SubmitTurn's acceptance followed by that same stream, in one
call (issue 10): the operation just accepted needs no ownership read, and a
fresh one's QUEUED event is sent as stored, without reading it back. With
``terminal_only`` it sends the acceptance (sequence 1) and the terminal event
only: the events between are read past without building a message for them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import grpc

from coordinator_svc.api.acceptance import DEFAULT_LIMITS, Accepted, accept
from coordinator_svc.api.admin_convert import NOTED_EXECUTIONS
from coordinator_svc.api.auth import Authenticator, Scope
from coordinator_svc.api.call_limits import CallLimits
from coordinator_svc.api.control import DispatchControl
from coordinator_svc.api.convert import (
    event_to_proto,
    op_state_from_proto,
    op_state_to_proto,
    operation_to_proto,
)
from coordinator_svc.api.errors import ApiError, abort_with, edge_refusal
from coordinator_svc.api.paging import decode_page_token, encode_page_token
from coordinator_svc.api.streamed_watch import with_output
from coordinator_svc.core.model import EventRecord, OperationRecord, OpState
from coordinator_svc.dispatcher.output_relay import OutputRelay
from coordinator_svc.feed import ChangeFeed
from coordinator_svc.ports import Journal, PageCursor, StaleVersion
from turnwire.common.v1 import errors_pb2, turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from turnwire.guard import add_guarded_service
from turnwire.limits import MessageLimits
from turnwire.observability.tracing import submitted_trace_context

_log = logging.getLogger(__name__)
_R = errors_pb2.ErrorReason
_T = TypeVar("_T")
_Reply = TypeVar("_Reply", covariant=True)
_Event = TypeVar(
    "_Event", coordinator_pb2.WatchOperationResponse, coordinator_pb2.SubmitAndWatchResponse
)
_TERMINAL = frozenset(op_state_to_proto(state) for state in OpState if state.terminal)

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
MAX_OPERATION_ID_CHARS = 255
CANCEL_RETRIES = 3


def utc_now() -> datetime:
    return datetime.now(UTC)


def _not_found() -> ApiError:
    # Identical for "no such id" and "another principal's id" (§7): no id,
    # no hint, nothing that differs between the two.
    return ApiError(_R.ERROR_REASON_OPERATION_NOT_FOUND, "operation not found")


def _check_operation_id(operation_id: str) -> None:
    if not operation_id or len(operation_id) > MAX_OPERATION_ID_CHARS:
        raise ApiError(
            _R.ERROR_REASON_ARGUMENT_INVALID,
            f"operation_id is required (1..{MAX_OPERATION_ID_CHARS} chars)",
            field="operation_id",
        )


def _states(values: Any) -> list[OpState]:
    try:
        return [op_state_from_proto(value) for value in values]
    except ValueError:
        raise ApiError(
            _R.ERROR_REASON_ARGUMENT_INVALID,
            "states must name known operation states (not UNSPECIFIED)",
            field="states",
        ) from None


def _page_size(requested: int) -> int:
    return DEFAULT_PAGE_SIZE if requested == 0 else min(requested, MAX_PAGE_SIZE)


def _may_have_notes(record: OperationRecord) -> bool:
    """Only a terminal operation whose execution is UNKNOWN or NOT_STARTED can have a
    verdict or have been requeued (§10 V2, V5): no journal read for the others."""
    return record.state.terminal and record.execution in NOTED_EXECUTIONS


def _acceptance_or_terminal(event: EventRecord) -> bool:
    """What SubmitAndWatch sends with terminal_only: the operation's first event
    (QUEUED, sequence 1: the acceptance) and its terminal one."""
    return event.sequence == 1 or event.to_state.terminal


class _Respond(Protocol[_Reply]):
    """Builds one streamed message (WatchOperationResponse, SubmitAndWatchResponse)."""

    def __call__(
        self, *, event: coordinator_pb2.OperationEvent, operation: coordinator_pb2.Operation
    ) -> _Reply: ...


async def _abort_unless_gone(context: Any, exc: Exception) -> None:
    """End a stream with the typed status of ``exc``, unless the call ended first (the
    client cancelled it, or the stopping server did): then there is nobody to send a
    status to, and gRPC's failure to send one is not an error of ours to log."""
    if context.done():
        return
    try:
        await abort_with(context, exc)
    except grpc.aio.AbortError:
        raise
    except Exception:
        if not context.done() and not context.cancelled():
            raise
        _log.debug("call ended before its status could be sent: %s", exc)


class TurnServicer(coordinator_pb2_grpc.TurnServiceServicer):
    def __init__(
        self,
        *,
        journal: Journal,
        dispatch: DispatchControl,
        feed: ChangeFeed,
        authenticator: Authenticator,
        clock: Callable[[], datetime] = utc_now,
        default_max_attempts: int = 5,
        watch_poll_seconds: float = 1.0,
        watch_page_size: int = 100,
        limits: MessageLimits = DEFAULT_LIMITS,
        call_limits: CallLimits | None = None,
        reread_on_poll: Callable[[str], None] | None = None,
        notes: Callable[[Sequence[coordinator_pb2.Operation]], Awaitable[None]] | None = None,
        on_replay: Callable[[], None] | None = None,
        relay: OutputRelay | None = None,
    ) -> None:
        """``reread_on_poll``: called with the operation when a watch's poll ran out
        with nothing heard, before it reads again (a replica's cache forgets the
        row, so a change whose notification was lost is read from the journal).
        ``on_replay``: called for every submit answered as a replay (C1), however
        it was found (metrics: a principal over quota is still answered).
        ``relay``: the streamed output relay (§12); None: ``stream_output`` is ignored."""
        self.relay = relay
        self._reread_on_poll = reread_on_poll
        self._on_replay = on_replay
        # Shows operator verdicts and requeue links (AdminService, §10) on the
        # Operations a read returns; None: a journal without operator records.
        self._notes = notes
        self._limits = limits
        # Issue 11: calls open at once, per principal and streams server-wide.
        self.call_limits = call_limits or CallLimits()
        self._journal = journal
        self._dispatch = dispatch
        self._feed = feed
        self._auth = authenticator
        self._clock = clock
        self._default_max_attempts = default_max_attempts
        self._watch_poll = watch_poll_seconds
        self._watch_page = watch_page_size
        self._closing = asyncio.Event()

    def close(self) -> None:
        """Shutting down: open watches end with UNAVAILABLE so clients reconnect.

        Call from the event loop. Publishing wakes every waiting watch now
        instead of at its next poll.
        """
        self._closing.set()
        self._feed.wake_all()

    async def _guard(self, context: Any, body: Callable[[str], Awaitable[_T]], scope: Scope) -> _T:
        """Authenticate (with ``scope``), run ``body(principal)``, turn any failure into a
        typed status."""
        try:
            principal = self._auth.authenticate(context.invocation_metadata(), scope)
            with self.call_limits.principal_call(principal):
                return await body(principal)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await abort_with(context, exc)
            raise AssertionError("context.abort returned") from exc  # pragma: no cover

    async def _guard_stream(
        self, context: Any, body: Callable[[str], AsyncIterator[_T]], *scopes: Scope
    ) -> AsyncIterator[_T]:
        """``_guard`` for a response stream (every one of ``scopes``): a failure ends it
        with a typed status."""
        try:
            with self.call_limits.stream_slot():
                principal = self._auth.authenticate(context.invocation_metadata(), *scopes)
                with self.call_limits.principal_stream(principal):
                    async for response in body(principal):
                        yield response
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort_unless_gone(context, exc)

    def _proto(self, record: OperationRecord) -> coordinator_pb2.Operation:
        return operation_to_proto(record, self._dispatch.waiting_for(record))

    async def _noted(
        self, operations: Sequence[coordinator_pb2.Operation]
    ) -> Sequence[coordinator_pb2.Operation]:
        """``operations`` with their verdicts and requeue links filled in (§10)."""
        if self._notes is not None:
            await self._notes(operations)
        return operations

    async def _owned(self, principal: str, operation_id: str) -> OperationRecord:
        _check_operation_id(operation_id)
        record = await self._journal.get_for_principal(principal, operation_id)
        if record is None:
            raise _not_found()
        return record

    # --- SubmitTurn -----------------------------------------------------------------
    async def SubmitTurn(
        self, request: coordinator_pb2.SubmitTurnRequest, context: Any
    ) -> coordinator_pb2.SubmitTurnResponse:
        async def body(principal: str) -> coordinator_pb2.SubmitTurnResponse:
            accepted = await self._accept(request, principal, context)
            return coordinator_pb2.SubmitTurnResponse(
                operation=self._proto(accepted.operation), replayed=accepted.replayed
            )

        return await self._guard(context, body, Scope.SUBMIT)

    async def _accept(
        self, request: coordinator_pb2.SubmitTurnRequest, principal: str, context: Any
    ) -> Accepted:
        accepted = await accept(
            request,
            principal,
            # The caller's trace goes on in the envelope (docs/TRACING.md).
            trace_context=submitted_trace_context(context.invocation_metadata()),
            journal=self._journal,
            dispatch=self._dispatch,
            feed=self._feed,
            clock=self._clock,
            default_max_attempts=self._default_max_attempts,
            limits=self._limits,
        )
        if accepted.replayed and self._on_replay is not None:
            self._on_replay()
        return accepted

    # --- GetOperation ---------------------------------------------------------------
    async def GetOperation(
        self, request: coordinator_pb2.GetOperationRequest, context: Any
    ) -> coordinator_pb2.GetOperationResponse:
        async def body(principal: str) -> coordinator_pb2.GetOperationResponse:
            record = await self._owned(principal, request.operation_id)
            (operation,) = await self._noted([self._proto(record)])
            return coordinator_pb2.GetOperationResponse(operation=operation)

        return await self._guard(context, body, Scope.READ)

    # --- ListOperations -------------------------------------------------------------
    async def ListOperations(
        self, request: coordinator_pb2.ListOperationsRequest, context: Any
    ) -> coordinator_pb2.ListOperationsResponse:
        async def body(principal: str) -> coordinator_pb2.ListOperationsResponse:
            states = _states(request.states)
            size = _page_size(request.page_size)
            after = (
                decode_page_token(principal, request.page_token, states=states)
                if request.page_token
                else None
            )
            # One extra row tells whether another page exists.
            records = await self._journal.list_for_principal(principal, states, size + 1, after)
            page = records[:size]
            response = coordinator_pb2.ListOperationsResponse(
                operations=await self._noted([self._proto(r) for r in page])
            )
            if len(records) > size:
                last = page[-1]
                response.next_page_token = encode_page_token(
                    principal, PageCursor(last.created_at, last.operation_id), states=states
                )
            return response

        return await self._guard(context, body, Scope.READ)

    # --- CancelOperation ------------------------------------------------------------
    async def CancelOperation(
        self, request: coordinator_pb2.CancelOperationRequest, context: Any
    ) -> coordinator_pb2.CancelOperationResponse:
        async def body(principal: str) -> coordinator_pb2.CancelOperationResponse:
            record = await self._cancel(principal, request.operation_id)
            (operation,) = await self._noted([self._proto(record)])
            return coordinator_pb2.CancelOperationResponse(operation=operation)

        return await self._guard(context, body, Scope.CANCEL)

    async def _cancel(self, principal: str, operation_id: str) -> OperationRecord:
        """C11 via the dispatcher; a terminal operation is returned as it is."""
        for attempt in range(CANCEL_RETRIES):
            record = await self._owned(principal, operation_id)
            if record.state.terminal:
                return record
            try:
                cancelled = await self._dispatch.request_cancel(record)
            except StaleVersion:
                # Another local writer got there first: reload and ask again.
                if attempt == CANCEL_RETRIES - 1:
                    raise
                continue
            self._feed.publish(operation_id)
            return cancelled
        raise AssertionError("unreachable")  # pragma: no cover - loop returns or raises

    # --- WatchOperation -------------------------------------------------------------
    async def WatchOperation(
        self, request: coordinator_pb2.WatchOperationRequest, context: Any
    ) -> AsyncIterator[coordinator_pb2.WatchOperationResponse]:
        async def body(principal: str) -> AsyncIterator[coordinator_pb2.WatchOperationResponse]:
            record = await self._owned(principal, request.operation_id)
            respond = coordinator_pb2.WatchOperationResponse
            # Any operation may be a requeued one (requeued_from): every message is noted.
            events = self._watch(
                record.operation_id, request.after_sequence, respond, noted=lambda r: True
            )
            if request.stream_output:
                events = self._with_output(
                    record.operation_id,
                    request.after_offset,
                    events,
                    chunk=lambda c: respond(chunk=c),
                    gap=lambda g: respond(gap=g),
                )
            async for response in events:
                yield response

        async for response in self._guard_stream(context, body, Scope.READ):
            yield response

    # --- SubmitAndWatch -------------------------------------------------------------
    async def SubmitAndWatch(
        self, request: coordinator_pb2.SubmitAndWatchRequest, context: Any
    ) -> AsyncIterator[coordinator_pb2.SubmitAndWatchResponse]:
        async def body(principal: str) -> AsyncIterator[coordinator_pb2.SubmitAndWatchResponse]:
            # Any refusal raises here, before a message: SubmitTurn's status, nothing stored.
            accepted = await self._accept(request.submit, principal, context)
            replayed = accepted.replayed

            def respond(
                *, event: coordinator_pb2.OperationEvent, operation: coordinator_pb2.Operation
            ) -> coordinator_pb2.SubmitAndWatchResponse:
                return coordinator_pb2.SubmitAndWatchResponse(
                    event=event, operation=operation, replayed=replayed
                )

            def output(**item: Any) -> coordinator_pb2.SubmitAndWatchResponse:
                return coordinator_pb2.SubmitAndWatchResponse(replayed=replayed, **item)

            # The operation came from this principal's key: no ownership read.
            record, cursor = accepted.operation, request.after_sequence
            first = accepted.first_event
            if first is not None and first.sequence > cursor:
                # Stored by this very call: sent as it is, not read back.
                yield respond(event=event_to_proto(first), operation=self._proto(record))
                cursor = first.sequence
            keep = _acceptance_or_terminal if request.terminal_only else None
            # A submitted turn is never a requeued one (a requeue's key is no client's):
            # only its end can carry a verdict or a requeue link.
            events = self._watch(record.operation_id, cursor, respond, keep, noted=_may_have_notes)
            if request.stream_output:
                events = self._with_output(
                    record.operation_id,
                    request.after_offset,
                    events,
                    chunk=lambda c: output(chunk=c),
                    gap=lambda g: output(gap=g),
                )
            async for response in events:
                yield response

        async for response in self._guard_stream(context, body, Scope.SUBMIT, Scope.READ):
            yield response

    async def _with_output(
        self,
        operation_id: str,
        after_offset: int,
        events: AsyncIterator[_Event],
        *,
        chunk: Callable[[turn_pb2.OutputChunk], _Event],
        gap: Callable[[turn_pb2.OutputGap], _Event],
    ) -> AsyncIterator[_Event]:
        """S1: ``events`` with the operation's relayed output between them, every chunk
        before the terminal event (S2, S3); events alone when nothing relays here."""
        if self.relay is None:
            async for response in events:
                yield response
            return
        with self.relay.subscribe(operation_id) as output:
            async for response in with_output(
                events, output, after_offset, chunk=chunk, gap=gap, terminal=_is_terminal
            ):
                yield response

    async def _watch(
        self,
        operation_id: str,
        after_sequence: int,
        respond: _Respond[_T],
        keep: Callable[[EventRecord], bool] | None = None,
        *,
        noted: Callable[[OperationRecord], bool] = lambda record: False,
    ) -> AsyncIterator[_T]:
        """The events after ``after_sequence``, each as ``respond(event=, operation=)``,
        until the terminal one; UNAVAILABLE / SHUTTING_DOWN when the server closes.
        With ``keep``, only the events it keeps are sent (the others are read past,
        no message built for them); the stream still ends after the terminal one."""
        cursor = after_sequence
        with self._feed.watching(operation_id):
            while not self._closing.is_set():
                mark = self._feed.mark(operation_id)  # before the journal: no lost wake-up
                events = await self._journal.events(operation_id, cursor, self._watch_page)
                record = await self._journal.get(operation_id)
                if record is None:  # pragma: no cover - operations are never deleted
                    raise _not_found()
                if events:
                    cursor = events[-1].sequence
                    sent = events if keep is None else [e for e in events if keep(e)]
                    if sent:
                        operation = self._proto(record)
                        if noted(record):
                            await self._noted([operation])
                        for event in sent:
                            yield respond(event=event_to_proto(event), operation=operation)
                            if event.to_state.terminal:
                                return
                    continue
                if record.state.terminal and cursor >= record.last_event_sequence:
                    return  # resumed after the end: nothing more will ever come
                await self._feed.wait_past(operation_id, mark, self._watch_poll)
                if self._reread_on_poll is not None and self._feed.mark(operation_id) == mark:
                    self._reread_on_poll(operation_id)
        raise ApiError(
            _R.ERROR_REASON_SHUTTING_DOWN,
            "coordinator is shutting down; reconnect with the last sequence you saw",
        )


def _is_terminal(
    response: coordinator_pb2.WatchOperationResponse | coordinator_pb2.SubmitAndWatchResponse,
) -> bool:
    return response.HasField("event") and response.event.to_state in _TERMINAL


def add_to_server(servicer: TurnServicer, server: grpc.aio.Server) -> None:
    """Register TurnService behind the edge guard: undecodable requests, out-of-range
    uint64 fields (``api.errors.edge_refusal``) and handler bugs all get typed answers."""
    add_guarded_service(
        server,
        coordinator_pb2_grpc.add_TurnServiceServicer_to_server,
        servicer,
        check=edge_refusal,
    )


SERVICE_NAME: str = coordinator_pb2.DESCRIPTOR.services_by_name["TurnService"].full_name
