"""The simulated world's shared parts: virtual time, the execution ledger and
the network (PROTOCOL.md §8 is checked against these, not against the cores).

Nothing here reads a real clock or does I/O. Time is a float of virtual
seconds; :func:`at` turns it into the aware datetime the coordinator core wants.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from turnwire.ids import dispatch_stamp
from turnwire.retry_policy import RetryRule

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """The aware datetime ``seconds`` of virtual time after the simulation epoch."""
    return EPOCH + timedelta(seconds=seconds)


def stamp_at(seconds: float) -> int:
    """Virtual time as a dispatch stamp (the runner's clock is the same clock)."""
    return dispatch_stamp(at(seconds))


@dataclass
class ExecutionEntry:
    """One executor start: the billable event (§8 invariant 1)."""

    index: int
    operation_id: str
    runner: str
    incarnation_id: str
    store_id: str
    attempt: int
    started_at: float
    # None while running; "succeeded" / "failed" / "killed" once over.
    outcome: str | None = None
    output: bytes = b""
    # R15: its number within its job (1, then each retry), what a failure
    # declared ("NONE", "APPLIED"; "" nothing), when it ended, and the number of
    # the row's latest execution record when it started (its own launch intent).
    number: int = 1
    effect: str = ""
    ended_at: float | None = None
    intent_number: int = 0


@dataclass
class Ledger:
    """Every executor start and how it ended, across all runners."""

    entries: list[ExecutionEntry] = field(default_factory=list)
    # Executor starts the executor itself refused (nothing ran, nothing billed).
    start_refusals: list[tuple[str, str]] = field(default_factory=list)
    # Operations whose runner died before their executor started, with what their
    # row showed then ("accepted" or "intent", issue 27): how each ended is counted.
    unstarted_at_crash: dict[str, str] = field(default_factory=dict)

    def start(
        self,
        operation_id: str,
        runner: str,
        incarnation_id: str,
        store_id: str,
        attempt: int,
        now: float,
        *,
        number: int = 1,
        intent_number: int = 0,
    ) -> ExecutionEntry:
        entry = ExecutionEntry(
            len(self.entries),
            operation_id,
            runner,
            incarnation_id,
            store_id,
            attempt,
            now,
            number=number,
            intent_number=intent_number,
        )
        self.entries.append(entry)
        return entry

    def starts(self, operation_id: str) -> list[ExecutionEntry]:
        return [e for e in self.entries if e.operation_id == operation_id]


# --- the network -------------------------------------------------------------------


@dataclass(frozen=True)
class StatusRequest:
    operation_id: str


@dataclass(frozen=True)
class DispatchRequest:
    operation_id: str
    envelope_digest: str
    kind: str
    expected_incarnation_id: str
    fencing_token: int
    attempt: int
    # §6 witness: the attempt's sent_at in microseconds (turnwire.ids.dispatch_stamp).
    dispatch_stamp: int = 0
    # What the envelope says of the executor (R14) and its heartbeat timeout (R12).
    executor: str = ""
    heartbeat_seconds: float | None = None


# --- executors (R12, R14), fixed by name so no schedule draws anything new --------

# The executor every third turn names; runner r2 does not serve it.
NAMED_EXECUTOR = "tool"
HEARTBEAT_SECONDS = 5.0


def turn_executor(operation_id: str) -> str:
    """The executor a simulated turn names ("" for the default): op3, op6, ... name one."""
    return NAMED_EXECUTOR if _number(operation_id) % 3 == 0 else ""


def turn_heartbeat(operation_id: str) -> float | None:
    """The heartbeat timeout of a simulated turn: every even one has one."""
    return HEARTBEAT_SECONDS if _number(operation_id) % 2 == 0 else None


def turn_retry(operation_id: str) -> RetryRule | None:
    """R15: the retry policy of a simulated turn: every fourth one (op1, op5, ...)
    may run its executor twice more after a failure that declared effect NONE."""
    return RETRY_RULE if _number(operation_id) % 4 == 1 else None


RETRY_RULE = RetryRule(max_retries=2, initial_backoff=1.0, max_backoff=4.0, multiplier=2.0)


def served_executors(runner: str) -> frozenset[str]:
    """What a simulated runner serves: all but r2 serve the named executor too."""
    return frozenset({"default"} if runner == "r2" else {"default", NAMED_EXECUTOR})


def _number(operation_id: str) -> int:
    digits = "".join(c for c in operation_id if c.isdigit())
    return int(digits) if digits else 0


@dataclass(frozen=True)
class CancelRequest:
    operation_id: str
    expected_incarnation_id: str
    fencing_token: int


@dataclass(frozen=True)
class ReleaseRequest:
    operation_id: str
    expected_incarnation_id: str
    fencing_token: int


Request = StatusRequest | DispatchRequest | CancelRequest | ReleaseRequest


@dataclass(frozen=True)
class Message:
    """One packet in flight. ``to_runner`` is set for requests; replies and
    watch reports go to the coordinator and carry the call they answer
    (``call_id``; 0 for a watch report) and the coordinator epoch that asked."""

    id: int
    to_runner: str | None
    call_id: int
    epoch: int
    body: Any
    # Which runner incarnation sent a reply (for the trace only).
    sender: str = ""
    # The coordinator replica that made the call (replies go back to it).
    replica: str = ""

    @property
    def is_request(self) -> bool:
        return self.to_runner is not None


@dataclass
class Network:
    """Packets in flight; the schedule picks which to deliver, drop or copy."""

    in_flight: dict[int, Message] = field(default_factory=dict)
    next_id: int = 1

    def send(
        self,
        to_runner: str | None,
        call_id: int,
        epoch: int,
        body: Any,
        sender: str = "",
        replica: str = "",
    ) -> Message:
        message = Message(self.next_id, to_runner, call_id, epoch, body, sender, replica)
        self.next_id += 1
        self.in_flight[message.id] = message
        return message

    def take(self, message_id: int) -> Message:
        return self.in_flight.pop(message_id)

    def duplicate(self, message_id: int) -> Message:
        original = self.in_flight[message_id]
        return self.send(
            original.to_runner,
            original.call_id,
            original.epoch,
            original.body,
            original.sender,
            original.replica,
        )


def describe(body: Any) -> str:
    """A short, stable rendering of a message body for traces."""
    name = type(body).__name__
    if name == "OperationRow":
        return (
            f"row({body.state.value} {body.execution.value} by {body.incarnation_id}"
            f"{' stop=' + body.stop_reason.value if body.stop_reason else ''}"
            f"{' released' if body.released else ''})"
        )
    fields = getattr(body, "__dataclass_fields__", {})
    shown = []
    for key in fields:
        value = getattr(body, key)
        if key in ("envelope_digest", "fencing_token"):
            continue
        if isinstance(value, bytes):
            value = value[:16]
        elif getattr(value, "__dataclass_fields__", None):
            value = describe(value)
        shown.append(f"{key}={value}")
    return f"{name}({', '.join(shown)})"
