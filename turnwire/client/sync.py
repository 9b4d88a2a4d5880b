"""The synchronous client for the coordinator's public TurnService (PROTOCOL.md §7)."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar, Unpack

import grpc

from turnwire.client.failures import (
    WaitLonger,
    exception_for,
    is_retryable,
)
from turnwire.client.retrying import RetryBudget, RetryPolicy
from turnwire.client.turns import Turn, TurnFields
from turnwire.client.values import (
    Operation,
    OperationEvent,
    OperationPage,
    OperationState,
    Submission,
)
from turnwire.client.watching import reopen_pause, stream_timeout
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc

DEFAULT_TIMEOUT = 10.0
_Reply = TypeVar("_Reply")


def new_idempotency_key() -> str:
    """A fresh key: ``tw-`` + a random UUID's hex (35 printable characters)."""
    return "tw-" + uuid.uuid4().hex


def bearer_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying the token; none at all when there is no token."""
    return (("authorization", f"Bearer {token}"),) if token else ()


def state_number(state: OperationState | str) -> coordinator_pb2.OperationState.ValueType:
    name = str(state).strip().upper().replace("-", "_")
    return coordinator_pb2.OperationState.Value("OPERATION_STATE_" + OperationState(name).value)


def as_policy(retries: int | RetryPolicy) -> RetryPolicy:
    return retries if isinstance(retries, RetryPolicy) else RetryPolicy(attempts=1 + retries)


class TurnwireClient:
    """Submit, inspect, watch and cancel turns.

    ``retries`` is how many times a call is sent again after a transient
    failure (or a full :class:`RetryPolicy`). Every call is safe to repeat:
    reads and cancels are idempotent, and a submit is repeated with the same
    idempotency key, so a lost reply returns the same operation
    (``Submission.replayed``). ``channel`` replaces the connection (tests).
    """

    def __init__(
        self,
        address: str,
        token: str | None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int | RetryPolicy = 4,
        channel: grpc.Channel | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.address = address
        self._owns_channel = channel is None
        if channel is None:
            channel = (
                grpc.secure_channel(address, credentials)
                if credentials is not None
                else grpc.insecure_channel(address)
            )
        self._channel = channel
        self._stub = coordinator_pb2_grpc.TurnServiceStub(channel)
        self._metadata = bearer_metadata(token)
        self._timeout = timeout
        self._policy = as_policy(retries)
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()

    def __enter__(self) -> TurnwireClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection if this client opened it."""
        if self._owns_channel:
            self._channel.close()

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
        if turn is not None and fields:
            raise TypeError("pass a Turn or its fields as keywords, not both")
        turn = turn if turn is not None else Turn.build(**fields)
        key = idempotency_key if idempotency_key is not None else new_idempotency_key()
        request = coordinator_pb2.SubmitTurnRequest(idempotency_key=key, turn=turn.to_proto())
        reply = self._call(self._stub.SubmitTurn, request)
        return Submission(
            operation=Operation.from_proto(reply.operation),
            replayed=reply.replayed,
            idempotency_key=key,
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

    def _call(self, method: Callable[..., _Reply], request: object) -> _Reply:
        """One unary call, repeated after transient failures within the policy."""
        budget = RetryBudget(self._policy, self._clock, self._rng)
        while True:
            budget.start_attempt()
            try:
                return method(request, timeout=self._timeout, metadata=self._metadata)
            except grpc.RpcError as error:
                pause = budget.next_pause() if is_retryable(error) else None
                if pause is None:
                    raise exception_for(error, attempts=budget.attempts) from None
            self._sleep(pause)

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
        try:
            for event in self._watch(operation_id, latest.last_event_sequence, deadline):
                if event.operation is not None:
                    latest = event.operation
                if event.is_terminal:
                    return latest if latest.is_terminal else self.get(operation_id)
        except WaitLonger as waited:
            raise WaitLonger(str(waited), operation=latest) from None
        # The stream ended without a terminal event: ask once more.
        latest = self.get(operation_id)
        if latest.is_terminal:
            return latest
        raise WaitLonger(
            f"{operation_id} is still {latest.state}: the watch ended early", operation=latest
        )

    def _watch(
        self, operation_id: str, after_sequence: int, deadline: float | None
    ) -> Iterator[OperationEvent]:
        cursor = after_sequence
        budget = RetryBudget(self._policy, self._clock, self._rng)
        while True:
            timeout = stream_timeout(deadline, self._clock, operation_id)
            budget.start_attempt()
            request = coordinator_pb2.WatchOperationRequest(
                operation_id=operation_id, after_sequence=cursor
            )
            call = self._stub.WatchOperation(request, timeout=timeout, metadata=self._metadata)
            try:
                for reply in call:
                    event = OperationEvent.from_proto(reply)
                    if event.sequence <= cursor:
                        continue  # already delivered before a reconnect
                    cursor = event.sequence
                    budget.reset()
                    yield event
                    if event.is_terminal:
                        return
                return
            except grpc.RpcError as error:
                deadline_passed = deadline is not None and self._clock() >= deadline
                pause = reopen_pause(
                    error,
                    budget,
                    deadline_passed=deadline_passed,
                    operation_id=operation_id,
                    cursor=cursor,
                )
            finally:
                call.cancel()
            self._sleep(pause)
