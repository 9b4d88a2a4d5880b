"""The asyncio client: the same surface as TurnwireClient, over grpc.aio.

Same retry rules, same idempotency-key handling, same exceptions; see the
``turnwire.client`` package docstring.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Unpack

import grpc
import grpc.aio

from turnwire.client.connection import AsyncConnection
from turnwire.client.failures import TurnwireError, WaitLonger
from turnwire.client.retrying import RetryBudget
from turnwire.client.streaming import (
    OutputCursor,
    StreamItem,
    submit_and_watch_opener,
    watch_opener,
)
from turnwire.client.sync import OpenStream, state_number, submit_request
from turnwire.client.turns import Turn, TurnFields
from turnwire.client.values import (
    Operation,
    OperationEvent,
    OperationPage,
    OperationState,
    Submission,
)
from turnwire.client.watching import (
    ended_early,
    is_unimplemented,
    no_operation,
    remaining,
    reopen_pause,
    stream_timeout,
    submission_label,
)
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc


class AsyncTurnwireClient(AsyncConnection):
    """Submit, inspect, watch and cancel turns from asyncio code.

    Create it inside a running event loop (grpc.aio channels bind to one).
    """

    _stub: coordinator_pb2_grpc.TurnServiceStub

    def _bind(self, channel: grpc.aio.Channel) -> None:
        self._stub = coordinator_pb2_grpc.TurnServiceStub(channel)

    async def submit(
        self,
        turn: Turn | None = None,
        /,
        *,
        idempotency_key: str | None = None,
        **fields: Unpack[TurnFields],
    ) -> Submission:
        """See TurnwireClient.submit."""
        request = submit_request(turn, idempotency_key, fields)
        reply = await self._call(self._stub.SubmitTurn, request)
        return Submission(
            operation=Operation.from_proto(reply.operation),
            replayed=reply.replayed,
            idempotency_key=request.idempotency_key,
        )

    async def get(self, operation_id: str) -> Operation:
        request = coordinator_pb2.GetOperationRequest(operation_id=operation_id)
        reply = await self._call(self._stub.GetOperation, request)
        return Operation.from_proto(reply.operation)

    async def cancel(self, operation_id: str) -> Operation:
        """See TurnwireClient.cancel."""
        request = coordinator_pb2.CancelOperationRequest(operation_id=operation_id)
        reply = await self._call(self._stub.CancelOperation, request)
        return Operation.from_proto(reply.operation)

    async def list(
        self,
        states: Iterable[OperationState | str] = (),
        *,
        page_size: int = 0,
        page_token: str = "",
    ) -> AsyncIterator[OperationPage]:
        """Your operations, one page at a time."""
        numbers = [state_number(state) for state in states]
        token = page_token
        while True:
            request = coordinator_pb2.ListOperationsRequest(
                states=numbers, page_size=page_size, page_token=token
            )
            reply = await self._call(self._stub.ListOperations, request)
            yield OperationPage(
                operations=tuple(Operation.from_proto(op) for op in reply.operations),
                next_page_token=reply.next_page_token,
            )
            if not reply.next_page_token:
                return
            token = reply.next_page_token

    def watch(
        self, operation_id: str, after_sequence: int = 0, *, timeout: float | None = None
    ) -> AsyncIterator[OperationEvent]:
        """See TurnwireClient.watch."""
        deadline = None if timeout is None else self._clock() + timeout
        return self._watch(operation_id, after_sequence, deadline)

    # The same surface as the sync client: a timeout that ends in WaitLonger
    # carrying the latest state, which asyncio.timeout() could not give.
    async def wait(self, operation_id: str, timeout: float | None = None) -> Operation:  # noqa: ASYNC109
        """See TurnwireClient.wait."""
        deadline = None if timeout is None else self._clock() + timeout
        latest = await self.get(operation_id)
        if latest.is_terminal:
            return latest
        events = self._watch(operation_id, latest.last_event_sequence, deadline)
        return await self._settle(operation_id, await self._last_operation(events, latest))

    async def submit_and_wait(
        self,
        turn: Turn | None = None,
        /,
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109  # as wait: WaitLonger with the state
        **fields: Unpack[TurnFields],
    ) -> Operation:
        """See TurnwireClient.submit_and_wait."""
        request = submit_request(turn, idempotency_key, fields)
        deadline = None if timeout is None else self._clock() + timeout

        def open_stream(cursor: int, stream_deadline: float | None) -> Any:
            return self._stub.SubmitAndWatch(
                coordinator_pb2.SubmitAndWatchRequest(
                    submit=request, after_sequence=cursor, terminal_only=True
                ),
                timeout=stream_deadline,
                metadata=self._metadata,
            )

        label = submission_label(request.idempotency_key)
        events = self._stream(open_stream, label, 0, deadline)
        try:
            latest = await self._last_operation(events, None)
        except TurnwireError as error:
            if not is_unimplemented(error):
                raise
            # An older coordinator: nothing was done, so submit (same key) and watch.
            reply = await self._call(self._stub.SubmitTurn, request)
            return await self.wait(reply.operation.operation_id, remaining(deadline, self._clock))
        if latest is None:
            raise no_operation(label)
        return await self._settle(latest.operation_id, latest)

    # --- streamed output (PROTOCOL.md §12) ----------------------------------

    def stream(
        self,
        operation_id: str,
        after_offset: int = 0,
        *,
        after_sequence: int = 0,
        timeout: float | None = None,
    ) -> AsyncIterator[StreamItem]:
        """See TurnwireClient.stream."""
        deadline = None if timeout is None else self._clock() + timeout

        cursor = OutputCursor(after_sequence, after_offset)
        opener = watch_opener(self._stub, self._metadata, operation_id)
        return self._output(opener, operation_id, cursor, deadline)

    def submit_and_stream(
        self,
        turn: Turn | None = None,
        /,
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        **fields: Unpack[TurnFields],
    ) -> AsyncIterator[StreamItem]:
        """See TurnwireClient.submit_and_stream."""
        request = submit_request(turn, idempotency_key, fields)
        deadline = None if timeout is None else self._clock() + timeout

        label = submission_label(request.idempotency_key)
        opener = submit_and_watch_opener(self._stub, self._metadata, request)
        return self._output(opener, label, OutputCursor(), deadline)

    async def _output(
        self,
        open_stream: Callable[[OutputCursor, float | None], Any],
        label: str,
        cursor: OutputCursor,
        deadline: float | None,
    ) -> AsyncIterator[StreamItem]:
        """See TurnwireClient._output."""
        budget = RetryBudget(self._policy, self._clock, self._rng)
        while True:
            timeout = stream_timeout(deadline, self._clock, label)
            budget.start_attempt()
            call = open_stream(cursor, timeout)
            try:
                async for reply in call:
                    item = cursor.take(reply)
                    label = cursor.operation_id or label
                    if item is None:
                        continue
                    budget.reset()
                    if not isinstance(item, OperationEvent):
                        yield item
                    elif item.is_terminal:
                        yield await self._settle(cursor.operation_id, cursor.latest)
                        return
                break  # ended without the terminal event: read the operation below
            except grpc.RpcError as error:
                await self._raise_if_plaintext_to_tls(error)
                deadline_passed = deadline is not None and self._clock() >= deadline
                pause = reopen_pause(
                    error,
                    budget,
                    deadline_passed=deadline_passed,
                    operation_id=label,
                    cursor=cursor.sequence,
                )
            finally:
                call.cancel()
            await self._sleep(pause)
        if not cursor.operation_id:
            raise no_operation(label)
        yield await self._settle(cursor.operation_id, cursor.latest)

    async def _last_operation(
        self, events: AsyncIterator[OperationEvent], latest: Operation | None
    ) -> Operation | None:
        """See TurnwireClient._last_operation."""
        try:
            async for event in events:  # the stream ends after the terminal event
                latest = event.operation or latest
        except WaitLonger as waited:
            raise WaitLonger(str(waited), operation=latest) from None
        return latest

    async def _settle(self, operation_id: str, latest: Operation | None) -> Operation:
        """See TurnwireClient._settle."""
        if latest is not None and latest.is_terminal:
            return latest
        latest = await self.get(operation_id)
        if latest.is_terminal:
            return latest
        raise ended_early(operation_id, latest)

    def _watch(
        self, operation_id: str, after_sequence: int, deadline: float | None
    ) -> AsyncIterator[OperationEvent]:
        def open_stream(cursor: int, stream_deadline: float | None) -> Any:
            request = coordinator_pb2.WatchOperationRequest(
                operation_id=operation_id, after_sequence=cursor
            )
            return self._stub.WatchOperation(
                request, timeout=stream_deadline, metadata=self._metadata
            )

        return self._stream(open_stream, operation_id, after_sequence, deadline)

    async def _stream(
        self, open_stream: OpenStream, label: str, after_sequence: int, deadline: float | None
    ) -> AsyncIterator[OperationEvent]:
        """See TurnwireClient._stream."""
        cursor = after_sequence
        budget = RetryBudget(self._policy, self._clock, self._rng)
        while True:
            timeout = stream_timeout(deadline, self._clock, label)
            budget.start_attempt()
            call = open_stream(cursor, timeout)
            try:
                async for reply in call:
                    event = OperationEvent.from_proto(reply)
                    label = event.operation_id or label
                    if event.sequence <= cursor:
                        continue  # already delivered before a reconnect
                    cursor = event.sequence
                    budget.reset()
                    yield event
                    if event.is_terminal:
                        return
                return
            except grpc.RpcError as error:
                await self._raise_if_plaintext_to_tls(error)
                deadline_passed = deadline is not None and self._clock() >= deadline
                pause = reopen_pause(
                    error,
                    budget,
                    deadline_passed=deadline_passed,
                    operation_id=label,
                    cursor=cursor,
                )
            finally:
                call.cancel()
            await self._sleep(pause)
