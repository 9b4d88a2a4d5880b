"""Play the coordinator by hand: grpc_testing's channel, driven from the test thread.

The client under test runs in a daemon thread (its calls block until the test
answers them); the test takes each RPC the client makes and terminates it with
the reply or failure the scenario needs. Fake time: deadlines never fire on
their own, and the client's pauses are recorded instead of slept.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc_testing

from turnwire.client import RetryPolicy, TurnwireClient
from turnwire.common.v1 import errors_pb2
from turnwire.coordinator.v1 import coordinator_pb2
from turnwire.errors import rich_status

SERVICE = coordinator_pb2.DESCRIPTOR.services_by_name["TurnService"]
SUBMIT = SERVICE.methods_by_name["SubmitTurn"]
GET = SERVICE.methods_by_name["GetOperation"]
LIST = SERVICE.methods_by_name["ListOperations"]
CANCEL = SERVICE.methods_by_name["CancelOperation"]
WATCH = SERVICE.methods_by_name["WatchOperation"]
SUBMIT_AND_WATCH = SERVICE.methods_by_name["SubmitAndWatch"]
OK = grpc.StatusCode.OK


class Background:
    """A call running in a daemon thread; `result` joins it with a bound."""

    def __init__(self, work: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            self._value = work()
        except BaseException as error:  # handed to the test thread
            self._error = error

    def result(self, timeout: float = 10.0) -> Any:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"client call still blocked after {timeout}s")
        if self._error is not None:
            raise self._error
        return self._value


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Scripted:
    """A TurnwireClient wired to a grpc_testing channel."""

    policy: RetryPolicy = field(default_factory=lambda: RetryPolicy(attempts=4))
    token: str | None = "tok-alice"
    clock: FakeClock = field(default_factory=FakeClock)
    pauses: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.channel = grpc_testing.channel([SERVICE], grpc_testing.strict_fake_time(0.0))
        self.client = TurnwireClient(
            "scripted:0",
            self.token,
            channel=self.channel,
            retries=self.policy,
            sleep=self._pause,
            clock=self.clock,
            rng=random.Random(7),
        )

    def _pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.clock.now += seconds

    def start(self, work: Callable[[TurnwireClient], Any]) -> Background:
        return Background(lambda: work(self.client))

    def take_unary(self, method: Any) -> tuple[dict[str, str], Any, Any]:
        metadata, request, rpc = self.channel.take_unary_unary(method)
        return dict(metadata), request, rpc

    def take_stream(self, method: Any) -> tuple[dict[str, str], Any, Any]:
        metadata, request, rpc = self.channel.take_unary_stream(method)
        return dict(metadata), request, rpc


def fail_unary(rpc: Any, code: grpc.StatusCode, details: str = "scripted failure") -> None:
    rpc.terminate(None, (), code, details)


def fail_typed(
    rpc: Any, code: grpc.StatusCode, reason: errors_pb2.ErrorReason.ValueType, message: str
) -> None:
    status = rich_status(code, reason, message)
    rpc.terminate(None, status.trailing_metadata, status.code, status.details)


def fail_stream_typed(
    rpc: Any, code: grpc.StatusCode, reason: errors_pb2.ErrorReason.ValueType, message: str
) -> None:
    status = rich_status(code, reason, message)
    rpc.terminate(status.trailing_metadata, status.code, status.details)


def operation(
    operation_id: str = "op_1",
    state: str = "QUEUED",
    *,
    last_event_sequence: int = 1,
    **fields: Any,
) -> coordinator_pb2.Operation:
    return coordinator_pb2.Operation(
        operation_id=operation_id,
        state=coordinator_pb2.OperationState.Value("OPERATION_STATE_" + state),
        last_event_sequence=last_event_sequence,
        **fields,
    )


def event(
    sequence: int, from_state: str, to_state: str, operation_id: str = "op_1", reason: str = ""
) -> coordinator_pb2.WatchOperationResponse:
    def number(name: str) -> Any:
        return coordinator_pb2.OperationState.Value("OPERATION_STATE_" + name)

    return coordinator_pb2.WatchOperationResponse(
        event=coordinator_pb2.OperationEvent(
            operation_id=operation_id,
            sequence=sequence,
            from_state=number(from_state),
            to_state=number(to_state),
            reason=reason,
        ),
        operation=operation(operation_id, to_state, last_event_sequence=sequence),
    )


def submitted_event(
    sequence: int,
    from_state: str,
    to_state: str,
    operation_id: str = "op_1",
    *,
    replayed: bool = False,
) -> coordinator_pb2.SubmitAndWatchResponse:
    """One SubmitAndWatch message: ``event(...)``'s event and operation, plus replayed."""
    watched = event(sequence, from_state, to_state, operation_id)
    return coordinator_pb2.SubmitAndWatchResponse(
        event=watched.event, operation=watched.operation, replayed=replayed
    )


def until_read(rpc: Any, timeout: float = 10.0) -> None:
    """Block until the client has taken every response sent on ``rpc``.

    grpc_testing drops unread responses when a stream ends with an error (as a
    real transport may), and offers no public way to ask; its RPC state keeps
    them in ``_responses``. A response taken is handled before the client reads
    on, so ending the stream after this never races the client.
    """
    state = rpc._rpc_state
    deadline = time.monotonic() + timeout
    while state._responses:
        if time.monotonic() > deadline:
            raise AssertionError(f"the client did not read its responses within {timeout}s")
        time.sleep(0.005)


class WatchConsumer:
    """Consumes client.watch in a thread, handing each event to the test as it arrives.

    grpc_testing drops unread responses when a stream ends with an error (as a
    real transport may), so the test waits for the client to read an event
    before it breaks the stream.
    """

    def __init__(self, scripted: Scripted, operation_id: str, after_sequence: int = 0) -> None:
        self._queue: queue.Queue[Any] = queue.Queue()
        self.seen: list[Any] = []

        def consume(client: TurnwireClient) -> list[Any]:
            for item in client.watch(operation_id, after_sequence):
                self.seen.append(item)
                self._queue.put(item)
            return self.seen

        self.call = scripted.start(consume)

    def next(self, timeout: float = 10.0) -> Any:
        return self._queue.get(timeout=timeout)
