"""Streamed partial output as the SDK hands it over (PROTOCOL.md §12), pure.

``client.stream(operation_id)`` and ``client.submit_and_stream(...)`` (sync
and asyncio) yield, in order: ``OutputChunk`` values as the executor emits
them, ``OutputGap`` values where chunks were lost to this reader (a bounded
buffer dropped them, or they died with a runner: never a silent hole), and
last the terminal ``Operation``, whose result is the durable truth (S4). A
dropped stream is reopened from both cursors (the last event sequence and the
last chunk offset), so no chunk is repeated and none is skipped unsaid (S7).

``OutputCursor`` decides what each streamed message means for the caller;
the clients only do the I/O around it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from turnwire.client.values import Operation, OperationEvent
from turnwire.coordinator.v1 import coordinator_pb2

Reply = coordinator_pb2.WatchOperationResponse | coordinator_pb2.SubmitAndWatchResponse


@dataclass(frozen=True)
class OutputChunk:
    """One chunk of the turn's streamed output (R13): 1, 2, 3, ... in emit order."""

    offset: int
    data: bytes
    content_type: str
    # When the executor emitted it, on the runner's clock (None if not sent).
    emitted_at: datetime | None

    @property
    def text(self) -> str:
        """The data as UTF-8 text (undecodable bytes replaced)."""
        return self.data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class OutputGap:
    """Chunks after ``after_offset`` and before ``next_offset`` are lost to this reader;
    ``next_offset`` 0: the relay could not learn how many more there were (S4)."""

    after_offset: int
    next_offset: int

    @property
    def rest_unknown(self) -> bool:
        return self.next_offset == 0

    def describe(self) -> str:
        if self.rest_unknown:
            return f"output after chunk {self.after_offset} could not be relayed"
        lost = self.next_offset - self.after_offset - 1
        return (
            f"{lost} chunk(s) lost after chunk {self.after_offset}; "
            f"the stream goes on at {self.next_offset}"
        )


StreamItem = OutputChunk | OutputGap | Operation


class OutputCursor:
    """Where a reader is in one operation's events and output (S7)."""

    def __init__(self, after_sequence: int = 0, after_offset: int = 0) -> None:
        self.sequence = after_sequence
        self.offset = after_offset
        self.latest: Operation | None = None
        self.operation_id = ""

    def take(self, reply: Reply) -> OutputChunk | OutputGap | OperationEvent | None:
        """The value ``reply`` carries for the caller; None for a repeat after a reopen."""
        kind = reply.WhichOneof("output")
        if kind == "chunk":
            chunk = reply.chunk
            if chunk.offset <= self.offset:
                return None
            self.offset = chunk.offset
            at = chunk.emitted_at
            emitted = (
                datetime.fromtimestamp(at.seconds + at.nanos / 1e9, UTC)
                if chunk.HasField("emitted_at")
                else None
            )
            return OutputChunk(chunk.offset, chunk.data, chunk.content_type, emitted)
        if kind == "gap":
            gap = OutputGap(reply.gap.after_offset, reply.gap.next_offset)
            if gap.next_offset:
                if gap.next_offset - 1 <= self.offset:
                    return None
                self.offset = gap.next_offset - 1
            return gap
        event = OperationEvent.from_proto(reply)
        self.operation_id = event.operation_id or self.operation_id
        if event.sequence <= self.sequence:
            return None
        self.sequence = event.sequence
        self.latest = event.operation or self.latest
        return event


def watch_request(operation_id: str, cursor: OutputCursor) -> coordinator_pb2.WatchOperationRequest:
    """WatchOperation with the output, from both of ``cursor``'s positions (S1, S7)."""
    return coordinator_pb2.WatchOperationRequest(
        operation_id=operation_id,
        after_sequence=cursor.sequence,
        stream_output=True,
        after_offset=cursor.offset,
    )


def submit_and_watch_request(
    submit: coordinator_pb2.SubmitTurnRequest, cursor: OutputCursor
) -> coordinator_pb2.SubmitAndWatchRequest:
    """SubmitAndWatch with the output and the terminal event only (S1, S7)."""
    return coordinator_pb2.SubmitAndWatchRequest(
        submit=submit,
        after_sequence=cursor.sequence,
        terminal_only=True,
        stream_output=True,
        after_offset=cursor.offset,
    )


# Opens one output stream from a cursor, with its deadline; the client's retry
# loop calls it again, from the cursor, after a dropped stream (S7). The stub is
# the blocking or the asyncio one: the two clients share the openers.
OutputOpener = Callable[[OutputCursor, float | None], Any]


def watch_opener(stub: Any, metadata: Sequence[tuple[str, str]], operation_id: str) -> OutputOpener:
    """WatchOperation for ``operation_id``'s events and output (S1)."""

    def open_stream(cursor: OutputCursor, deadline: float | None) -> Any:
        request = watch_request(operation_id, cursor)
        return stub.WatchOperation(request, timeout=deadline, metadata=metadata)

    return open_stream


def submit_and_watch_opener(
    stub: Any, metadata: Sequence[tuple[str, str]], submit: coordinator_pb2.SubmitTurnRequest
) -> OutputOpener:
    """SubmitAndWatch for ``submit``, the same key on every reopening (S1)."""

    def open_stream(cursor: OutputCursor, deadline: float | None) -> Any:
        request = submit_and_watch_request(submit, cursor)
        return stub.SubmitAndWatch(request, timeout=deadline, metadata=metadata)

    return open_stream
