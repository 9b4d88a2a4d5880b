"""The synchronous client for the coordinator's public TurnService (PROTOCOL.md §7)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, Unpack

import grpc

from turnwire.client.connection import SyncConnection
from turnwire.client.failures import (
    TurnwireError,
    WaitLonger,
)
from turnwire.client.retrying import RetryBudget
from turnwire.client.streaming import (
    OutputCursor,
    StreamItem,
    submit_and_watch_opener,
    watch_opener,
)
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

_Reply = TypeVar("_Reply")


def new_idempotency_key() -> str:
    """A fresh key: ``tw-`` + a random UUID's hex (35 printable characters)."""
    return "tw-" + uuid.uuid4().hex


def state_number(state: OperationState | str) -> coordinator_pb2.OperationState.ValueType:
    name = str(state).strip().upper().replace("-", "_")
    return coordinator_pb2.OperationState.Value("OPERATION_STATE_" + OperationState(name).value)


def submit_request(
    turn: Turn | None, idempotency_key: str | None, fields: TurnFields
) -> coordinator_pb2.SubmitTurnRequest:
    """The SubmitTurnRequest for ``submit``/``submit_and_wait``; a fresh key if none."""
    if turn is not None and fields:
        raise TypeError("pass a Turn or its fields as keywords, not both")
    turn = turn if turn is not None else Turn.build(**fields)
    key = idempotency_key if idempotency_key is not None else new_idempotency_key()
    return coordinator_pb2.SubmitTurnRequest(idempotency_key=key, turn=turn.to_proto())


# Opens one response stream: (after_sequence, stream deadline in seconds) -> the call.
OpenStream = Callable[[int, float | None], Any]


class TurnwireClient(SyncConnection):
    """Submit, inspect, watch and cancel turns.

    ``retries`` is how many times a call is sent again after a transient
    failure (or a full :class:`RetryPolicy`). Every call is safe to repeat:
    reads and cancels are idempotent, and a submit is repeated with the same
    idempotency key, so a lost reply returns the same operation
    (``Submission.replayed``). ``channel`` replaces the connection (tests).
    """

    _stub: coordinator_pb2_grpc.TurnServiceStub

    def _bind(self, channel: grpc.Channel) -> None:
        self._stub = coordinator_pb2_grpc.TurnServiceStub(channel)

    # --- unary calls -----------------------------------------------------

    def submit(
        self,
        turn: Turn | None = None,
        /,
        *,
        idempotency_key: str | None = None,
        **fields: Unpack[TurnFields],
    ) -> Submission:
        """Accept a turn: pass a :class:`Turn`, or its fields as keywords.

        Without ``idempotency_key`` a fresh one is made; it is returned in the
        Submission and reused for every retry of this call.
        """
        request = submit_request(turn, idempotency_key, fields)
        reply = self._call(self._stub.SubmitTurn, request)
        return Submission(
            operation=Operation.from_proto(reply.operation),
            replayed=reply.replayed,
            idempotency_key=request.idempotency_key,
        )

    def get(self, operation_id: str) -> Operation:
        request = coordinator_pb2.GetOperationRequest(operation_id=operation_id)
        return Operation.from_proto(self._call(self._stub.GetOperation, request).operation)

    def cancel(self, operation_id: str) -> Operation:
        """Ask the operation to stop; the first stop reason wins (C11).

        The returned state may not be terminal yet; a turn that finished first
        stays SUCCEEDED with ``cancel_lost_race``.
        """
        request = coordinator_pb2.CancelOperationRequest(operation_id=operation_id)
        return Operation.from_proto(self._call(self._stub.CancelOperation, request).operation)

    def list(
        self,
        states: Iterable[OperationState | str] = (),
        *,
        page_size: int = 0,
        page_token: str = "",
    ) -> Iterator[OperationPage]:
        """Your operations, one page at a time (lazily: one call per page)."""
        numbers = [state_number(state) for state in states]
        token = page_token
        while True:
            request = coordinator_pb2.ListOperationsRequest(
                states=numbers, page_size=page_size, page_token=token
            )
            reply = self._call(self._stub.ListOperations, request)
            yield OperationPage(
                operations=tuple(Operation.from_proto(op) for op in reply.operations),
                next_page_token=reply.next_page_token,
            )
            if not reply.next_page_token:
                return
            token = reply.next_page_token

    # --- watching --------------------------------------------------------

    def watch(
        self, operation_id: str, after_sequence: int = 0, *, timeout: float | None = None
    ) -> Iterator[OperationEvent]:
        """Every transition after ``after_sequence``, live; ends after the terminal one.

        A dropped stream is reopened from the last event seen, so no event is
        missed or repeated; reconnects are bounded by the retry policy (the
        budget starts over whenever an event arrives). When it gives up it
        raises RetryLater with ``resume_after`` set. With ``timeout`` it raises
        WaitLonger once that many seconds have passed.
        """
        deadline = None if timeout is None else self._clock() + timeout
        return self._watch(operation_id, after_sequence, deadline)

    def wait(self, operation_id: str, timeout: float | None = None) -> Operation:
        """Watch until the operation is terminal and return it.

        Raises WaitLonger (carrying the latest known state) if ``timeout``
        seconds pass first; the operation itself is not touched.
        """
        deadline = None if timeout is None else self._clock() + timeout
        latest = self.get(operation_id)
        if latest.is_terminal:
            return latest
        events = self._watch(operation_id, latest.last_event_sequence, deadline)
        return self._settle(operation_id, self._last_operation(events, latest))

    def submit_and_wait(
        self,
        turn: Turn | None = None,
        /,
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        **fields: Unpack[TurnFields],
    ) -> Operation:
        """Submit a turn and wait until it is terminal, in one call (SubmitAndWatch).

        The same as ``wait(submit(...).operation.operation_id)`` in one call
        where those make three (SubmitTurn, GetOperation, WatchOperation), and
        returns the terminal operation. It asks for the acceptance and the
        terminal event only (``terminal_only``): the transitions between are
        not sent. Submitting is ``submit``'s: the same refusals, and without
        ``idempotency_key`` a fresh key is made. Every retry (after
        UNAVAILABLE, a deadline, JOURNAL_UNAVAILABLE or SHUTTING_DOWN, within
        the retry policy) sends the same key, so it replays the same
        operation, and resumes after the last event seen; a refusal is never
        retried. ``timeout`` is ``wait``'s: WaitLonger carries the latest
        operation this call saw, usually the accepted one (QUEUED), since the
        events between acceptance and the end are not sent (``get`` it for
        its current state). A timeout or a give-up never cancels the turn:
        pass your own key to find it again (submitting it once more returns
        the same operation). A coordinator without SubmitAndWatch gets
        SubmitTurn and WatchOperation.
        """
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
            latest = self._last_operation(events, None)
        except TurnwireError as error:
            if not is_unimplemented(error):
                raise
            # An older coordinator: nothing was done, so submit (same key) and watch.
            reply = self._call(self._stub.SubmitTurn, request)
            return self.wait(reply.operation.operation_id, remaining(deadline, self._clock))
        if latest is None:
            raise no_operation(label)
        return self._settle(latest.operation_id, latest)

    # --- streamed output (PROTOCOL.md §12) ----------------------------------

    def stream(
        self,
        operation_id: str,
        after_offset: int = 0,
        *,
        after_sequence: int = 0,
        timeout: float | None = None,
    ) -> Iterator[StreamItem]:
        """The operation's streamed output, live, then the terminal Operation.

        Yields ``OutputChunk`` values in offset order as the executor emits
        them (chunks after ``after_offset``), an ``OutputGap`` wherever chunks
        were lost to this reader (never a silent hole), and last the terminal
        ``Operation``, whose result is the durable truth: chunks are not
        journaled (§12 S4). A dropped stream is reopened from the last event
        and the last chunk seen (S7), within the retry policy, as ``watch``.
        ``timeout``: WaitLonger once that many seconds have passed.
        """
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
    ) -> Iterator[StreamItem]:
        """Submit a turn and stream its output (SubmitAndWatch with stream_output):
        ``stream``'s values, ending with the terminal Operation. Submitting and
        retrying are ``submit_and_wait``'s (the same key on every retry)."""
        request = submit_request(turn, idempotency_key, fields)
        deadline = None if timeout is None else self._clock() + timeout

        label = submission_label(request.idempotency_key)
        opener = submit_and_watch_opener(self._stub, self._metadata, request)
        return self._output(opener, label, OutputCursor(), deadline)

    def _output(
        self,
        open_stream: Callable[[OutputCursor, float | None], Any],
        label: str,
        cursor: OutputCursor,
        deadline: float | None,
    ) -> Iterator[StreamItem]:
        budget = RetryBudget(self._policy, self._clock, self._rng)
        while True:
            timeout = stream_timeout(deadline, self._clock, label)
            budget.start_attempt()
            call = open_stream(cursor, timeout)
            try:
                for reply in call:
                    item = cursor.take(reply)
                    label = cursor.operation_id or label
                    if item is None:
                        continue
                    budget.reset()
                    if not isinstance(item, OperationEvent):
                        yield item
                    elif item.is_terminal:
                        yield self._settle(cursor.operation_id, cursor.latest)
                        return
                break  # ended without the terminal event: read the operation below
            except grpc.RpcError as error:
                self._raise_if_plaintext_to_tls(error)
                deadline_passed = deadline is not None and self._clock() >= deadline
                pause = reopen_pause(
                    error,
                    budget,
                    deadline_passed=deadline_passed,
                    operation_id=label,
                    cursor=cursor.sequence,
                )
            finally:
                _end_stream(call)
            self._sleep(pause)
        if not cursor.operation_id:
            raise no_operation(label)
        yield self._settle(cursor.operation_id, cursor.latest)

    def _last_operation(
        self, events: Iterator[OperationEvent], latest: Operation | None
    ) -> Operation | None:
        """The operation as of the terminal event (or the last one, if the stream
        ended first); WaitLonger carries the latest known state."""
        try:
            for event in events:  # the stream ends after the terminal event
                latest = event.operation or latest
        except WaitLonger as waited:
            raise WaitLonger(str(waited), operation=latest) from None
        return latest

    def _settle(self, operation_id: str, latest: Operation | None) -> Operation:
        """``latest`` if terminal, else the operation read once more (WaitLonger if
        still not terminal: the stream ended early)."""
        if latest is not None and latest.is_terminal:
            return latest
        latest = self.get(operation_id)
        if latest.is_terminal:
            return latest
        raise ended_early(operation_id, latest)

    def _watch(
        self, operation_id: str, after_sequence: int, deadline: float | None
    ) -> Iterator[OperationEvent]:
        def open_stream(cursor: int, stream_deadline: float | None) -> Any:
            request = coordinator_pb2.WatchOperationRequest(
                operation_id=operation_id, after_sequence=cursor
            )
            return self._stub.WatchOperation(
                request, timeout=stream_deadline, metadata=self._metadata
            )

        return self._stream(open_stream, operation_id, after_sequence, deadline)

    def _stream(
        self, open_stream: OpenStream, label: str, after_sequence: int, deadline: float | None
    ) -> Iterator[OperationEvent]:
        """The events of one operation's stream, reopened after ``cursor`` on a
        transient failure (see ``watch``); ``label`` names it in errors until
        its first event names the operation."""
        cursor = after_sequence
        budget = RetryBudget(self._policy, self._clock, self._rng)
        while True:
            timeout = stream_timeout(deadline, self._clock, label)
            budget.start_attempt()
            call = open_stream(cursor, timeout)
            try:
                for reply in call:
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
                self._raise_if_plaintext_to_tls(error)
                deadline_passed = deadline is not None and self._clock() >= deadline
                pause = reopen_pause(
                    error,
                    budget,
                    deadline_passed=deadline_passed,
                    operation_id=label,
                    cursor=cursor,
                )
            finally:
                _end_stream(call)
            self._sleep(pause)


def _end_stream(call: Any) -> None:
    """Cancel a stream that is left before its end (or close it after one).

    A traced channel (opentelemetry-instrumentation-grpc's sync interceptor)
    hands a stream back as a plain generator with no ``cancel()``; closing the
    generator ends the wrapped call the same way (docs/TRACING.md).
    """
    stop = getattr(call, "cancel", None) or getattr(call, "close", None)
    if stop is not None:
        stop()
