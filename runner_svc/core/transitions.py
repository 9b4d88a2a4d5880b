"""Theory of operation: every change to a runner row, in one table.

A row is born by ``Admit`` (a Dispatch was accepted) or ``Tombstone`` (a
Cancel for an unknown id, R5). An accepted row is launched in two durable
steps, ``LaunchIntent`` then ``ConfirmStart`` (R3); a turn that launches at
once is admitted with its launch intent (``Admit`` or ``TakeOver`` with
``with_intent``: the row is born ``LAUNCHING``, exactly as the two writes
would leave it, in one commit, issue 27). It ends with exactly one
``Settle`` (R7); a turn that finished before its confirmation was written
settles straight from ``LAUNCHING`` as ``STARTED`` with its start time (the
settled row implies the start, so the confirmation is subsumed).
``TakeOver`` is §6 re-admission: a row an *earlier* incarnation accepted but
never launched becomes this incarnation's before it may launch.
A retry (R15) happens inside the row: ``EndExecution`` records a failed
execution that declared effect NONE without settling (the row stays
``RUNNING``, ``STARTED``: an executor did start), and ``RetryIntent`` is the
next execution's own launch intent; ``ConfirmStart`` and ``Settle`` then act
on that execution. Every execution is a record on the row
(``OperationRow.executions``), written in the same transaction as the change
it belongs to. ``RecordStopReason`` keeps the first reason only (R6), ``RaiseFencingToken``
remembers the highest token seen (§5), ``Release`` drops a settled result but
keeps the row (R9).

``apply(row, event)`` is pure: it returns the new row or raises
:class:`IllegalRowEvent` and changes nothing. The store calls it inside the
write transaction, so an illegal change never reaches disk. Sequences are the
store's business; ``apply`` keeps the old one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from runner_svc.core import retries
from runner_svc.core.model import (
    Execution,
    ExecutionRecord,
    OperationRow,
    RowState,
    SlotKind,
    StopReason,
    TurnFailure,
    TurnOutput,
)

_S = RowState
_TERMINAL_OUTCOMES = frozenset({_S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.TIMED_OUT})


@dataclass(frozen=True)
class Admit:
    operation_id: str
    incarnation_id: str
    kind: SlotKind
    envelope_digest: str
    attempt: int
    fencing_token: int
    at: float
    dispatch_stamp: int = 0
    # R3, R4: the launch intent of execution 1 goes in the same write (issue 27).
    with_intent: bool = False


@dataclass(frozen=True)
class Tombstone:
    operation_id: str
    incarnation_id: str
    fencing_token: int
    at: float


@dataclass(frozen=True)
class TakeOver:
    incarnation_id: str
    attempt: int
    fencing_token: int
    at: float
    dispatch_stamp: int = 0
    # R3, R4: the launch intent of execution 1 goes in the same write (issue 27).
    with_intent: bool = False


@dataclass(frozen=True)
class LaunchIntent:
    incarnation_id: str
    at: float = 0.0


@dataclass(frozen=True)
class EndExecution:
    """R15: the current execution failed, declared effect NONE, and a retry may follow."""

    incarnation_id: str
    at: float
    error: TurnFailure
    # When the executor started (a turn that ended before its confirmation).
    started_at: float | None = None


@dataclass(frozen=True)
class RetryIntent:
    """R15: the launch intent of the next execution (R3, per execution)."""

    incarnation_id: str
    at: float
    reason: str = ""


@dataclass(frozen=True)
class ConfirmStart:
    incarnation_id: str
    at: float


@dataclass(frozen=True)
class Settle:
    incarnation_id: str
    state: RowState
    execution: Execution
    at: float
    result: TurnOutput | None = None
    error: TurnFailure | None = None
    # When the executor started, for a STARTED settlement: a row that never got
    # its start confirmation (R3: the turn finished first) records it here.
    started_at: float | None = None
    # How many output chunks the execution emitted (R13): its stream's final offset.
    output_chunks: int = 0
    # The current execution's own start truth when it differs from the row's
    # (R15: a retry whose start was refused after an earlier execution ran).
    current_execution: Execution | None = None


@dataclass(frozen=True)
class RecordStopReason:
    reason: StopReason


@dataclass(frozen=True)
class RaiseFencingToken:
    fencing_token: int


@dataclass(frozen=True)
class Release:
    pass


RowEvent = (
    Admit
    | Tombstone
    | TakeOver
    | LaunchIntent
    | EndExecution
    | RetryIntent
    | ConfirmStart
    | Settle
    | RecordStopReason
    | RaiseFencingToken
    | Release
)


class IllegalRowEvent(ValueError):
    """A row change the runner rules do not allow; nothing was written."""

    def __init__(self, operation_id: str, source: RowState | None, event: object, why: str):
        shown = source.value if source is not None else "absent"
        super().__init__(f"{operation_id}: {type(event).__name__} from {shown}: {why}")
        self.source = source
        self.event = event


# The one table: from which states each event may start (None = no row yet).
SOURCES: dict[type[Any], frozenset[RowState | None]] = {
    Admit: frozenset({None}),
    Tombstone: frozenset({None}),
    TakeOver: frozenset({_S.ACCEPTED}),
    LaunchIntent: frozenset({_S.ACCEPTED}),
    EndExecution: frozenset({_S.LAUNCHING, _S.RUNNING}),
    RetryIntent: frozenset({_S.RUNNING}),
    # RUNNING: a retry's start (R15); the row itself is confirmed already.
    ConfirmStart: frozenset({_S.LAUNCHING, _S.RUNNING}),
    Settle: frozenset({_S.ACCEPTED, _S.LAUNCHING, _S.RUNNING}),
    RecordStopReason: frozenset({_S.ACCEPTED, _S.LAUNCHING, _S.RUNNING}),
    RaiseFencingToken: frozenset(
        {_S.ACCEPTED, _S.LAUNCHING, _S.RUNNING, _S.TOMBSTONED, *_TERMINAL_OUTCOMES}
    ),
    Release: frozenset(_TERMINAL_OUTCOMES),
}

# Settle targets per source. A never-launched row can only be stopped, and
# provably did not start; LAUNCHING may also fail to start (start refused).
SETTLE_TARGETS: dict[RowState, frozenset[RowState]] = {
    _S.ACCEPTED: frozenset({_S.CANCELLED, _S.TIMED_OUT}),
    _S.LAUNCHING: _TERMINAL_OUTCOMES,
    _S.RUNNING: _TERMINAL_OUTCOMES,
}


def apply(row: OperationRow | None, event: RowEvent, operation_id: str = "") -> OperationRow:
    """The row after ``event``; raises IllegalRowEvent (and changes nothing) if illegal."""
    source = row.state if row is not None else None
    name = row.operation_id if row is not None else operation_id
    if source not in SOURCES[type(event)]:
        raise IllegalRowEvent(name, source, event, "not a legal source state")
    handler = _HANDLERS[type(event)]
    return handler(row, event, name)


def _refuse(row: OperationRow | None, event: object, why: str) -> IllegalRowEvent:
    return IllegalRowEvent(row.operation_id if row else "", row.state if row else None, event, why)


def _admit(row: OperationRow | None, event: Admit, name: str) -> OperationRow:
    admitted = OperationRow(
        operation_id=event.operation_id,
        state=_S.ACCEPTED,
        execution=Execution.NOT_STARTED,
        incarnation_id=event.incarnation_id,
        sequence=0,
        fencing_token=event.fencing_token,
        attempt=event.attempt,
        kind=event.kind,
        envelope_digest=event.envelope_digest,
        accepted_at=event.at,
        dispatch_stamp=event.dispatch_stamp,
    )
    return _with_intent(admitted, event)


def _with_intent(row: OperationRow, event: Admit | TakeOver) -> OperationRow:
    """The admitted row, launched too when the admission carries the intent: the
    launch intent's own rule applied to it, so one write is legal exactly when
    the two would be (R3)."""
    if not event.with_intent:
        return row
    return _launch_intent(row, LaunchIntent(event.incarnation_id, event.at), row.operation_id)


def _tombstone(row: OperationRow | None, event: Tombstone, name: str) -> OperationRow:
    return OperationRow(
        operation_id=event.operation_id,
        state=_S.TOMBSTONED,
        execution=Execution.NOT_STARTED,
        incarnation_id=event.incarnation_id,
        sequence=0,
        fencing_token=event.fencing_token,
        stop_reason=StopReason.CANCEL,
        settled_at=event.at,
    )


def _take_over(row: OperationRow | None, event: TakeOver, name: str) -> OperationRow:
    assert row is not None
    if row.incarnation_id == event.incarnation_id:
        raise _refuse(row, event, "only an earlier incarnation's row can be taken over")
    if row.stop_reason not in (None, StopReason.SHUTDOWN):
        raise _refuse(row, event, "a row with a stop reason is never launched")
    taken = replace(
        row,
        incarnation_id=event.incarnation_id,
        attempt=event.attempt,
        fencing_token=max(row.fencing_token, event.fencing_token),
        accepted_at=event.at,
        dispatch_stamp=event.dispatch_stamp,
        # The earlier process's shutdown does not follow the turn (R6 still
        # holds within an incarnation: the new one records its own reasons).
        stop_reason=None,
    )
    return _with_intent(taken, event)


def _launch_intent(row: OperationRow | None, event: LaunchIntent, name: str) -> OperationRow:
    assert row is not None
    if row.incarnation_id != event.incarnation_id:
        raise _refuse(row, event, "launch needs the row taken over first (§6)")
    if row.stop_reason is not None:
        raise _refuse(row, event, "a row with a stop reason is never launched")
    first = ExecutionRecord(number=1, launched_at=event.at)
    return replace(row, state=_S.LAUNCHING, execution=Execution.UNKNOWN, executions=(first,))


def _open_execution(row: OperationRow) -> ExecutionRecord | None:
    last = row.executions[-1] if row.executions else None
    return last if last is not None and not last.ended else None


def _with_current(row: OperationRow, record: ExecutionRecord) -> tuple[ExecutionRecord, ...]:
    return (*row.executions[:-1], record)


def _confirm_start(row: OperationRow | None, event: ConfirmStart, name: str) -> OperationRow:
    assert row is not None
    if row.incarnation_id != event.incarnation_id:
        raise _refuse(row, event, "another incarnation launched this row")
    current = _open_execution(row)
    if row.state is _S.RUNNING and (current is None or current.started_at is not None):
        raise _refuse(row, event, "no retry awaits its start confirmation")
    executions = row.executions
    if current is not None:
        started = replace(current, execution=Execution.STARTED, started_at=event.at)
        executions = _with_current(row, started)
    started_at = row.started_at if row.started_at is not None else event.at
    return replace(
        row,
        state=_S.RUNNING,
        execution=Execution.STARTED,
        started_at=started_at,
        executions=executions,
    )


def _end_execution(row: OperationRow | None, event: EndExecution, name: str) -> OperationRow:
    assert row is not None
    if row.incarnation_id != event.incarnation_id:
        raise _refuse(row, event, "another incarnation launched this row")
    if row.stop_reason is not None:
        raise _refuse(row, event, "a stopped turn is settled, never retried (R15)")
    if not retries.retryable(event.error):
        raise _refuse(row, event, "only a failure that declared effect NONE is retried (R15)")
    current = _open_execution(row)
    if current is None:
        raise _refuse(row, event, "no execution is running")
    ended = replace(
        current,
        execution=Execution.STARTED,
        started_at=current.started_at if current.started_at is not None else event.started_at,
        ended_at=event.at,
        outcome=_S.FAILED,
        error=event.error,
    )
    # The row says STARTED from here on: an executor did start for this turn.
    started_at = row.started_at if row.started_at is not None else ended.started_at
    return replace(
        row,
        state=_S.RUNNING,
        execution=Execution.STARTED,
        started_at=started_at if started_at is not None else event.at,
        executions=_with_current(row, ended),
    )


def _retry_intent(row: OperationRow | None, event: RetryIntent, name: str) -> OperationRow:
    assert row is not None
    if row.incarnation_id != event.incarnation_id:
        raise _refuse(row, event, "only the incarnation that ran the turn retries it")
    if row.stop_reason is not None:
        raise _refuse(row, event, "a row with a stop reason is never launched")
    last = row.executions[-1] if row.executions else None
    if not retries.may_follow(last):
        raise _refuse(row, event, "only after an ended failure that declared effect NONE (R15)")
    assert last is not None
    record = ExecutionRecord(
        number=last.number + 1, launched_at=event.at, retry_reason=event.reason
    )
    return replace(row, executions=(*row.executions, record))


def _settle(row: OperationRow | None, event: Settle, name: str) -> OperationRow:
    assert row is not None
    if event.state not in SETTLE_TARGETS[row.state]:
        raise _refuse(row, event, f"cannot settle as {event.state.value}")
    if row.state is not _S.ACCEPTED and row.incarnation_id != event.incarnation_id:
        raise _refuse(row, event, "an earlier incarnation's launch was interrupted")
    if row.state is _S.ACCEPTED and event.execution is not Execution.NOT_STARTED:
        raise _refuse(row, event, "a never-launched row did not start")
    if row.state is _S.RUNNING and event.execution is not Execution.STARTED:
        raise _refuse(row, event, "a confirmed start stays STARTED")
    if (event.state is _S.SUCCEEDED) != (event.result is not None):
        raise _refuse(row, event, "exactly SUCCEEDED carries a result")
    if event.started_at is not None and event.execution is not Execution.STARTED:
        raise _refuse(row, event, "only a start has a start time")
    executions = row.executions
    current = _open_execution(row)
    if current is not None:
        truth = event.current_execution or event.execution
        ended = replace(
            current,
            execution=truth,
            started_at=current.started_at if current.started_at is not None else event.started_at,
            ended_at=event.at,
            outcome=event.state,
            error=event.error,
        )
        executions = _with_current(row, ended)
    return replace(
        row,
        executions=executions,
        state=event.state,
        execution=event.execution,
        incarnation_id=event.incarnation_id,
        result=event.result,
        error=event.error,
        settled_at=event.at,
        output_chunks=event.output_chunks,
        # A confirmed start keeps its time; an unconfirmed one gets the
        # settlement's (the settled row implies the start, R3).
        started_at=row.started_at if row.started_at is not None else event.started_at,
        # Settle decides which stop reason the row reports: the one that stopped
        # the turn. A turn that succeeded finished on its own; the stop asked for
        # meanwhile (a cancel that lost the race, a drain it outlived: R6, R8)
        # stopped nothing. Any other settlement after a stop is the stop's doing
        # (settlement.decide_settlement) and keeps it.
        stop_reason=None if event.state is _S.SUCCEEDED else row.stop_reason,
    )


def _record_stop(row: OperationRow | None, event: RecordStopReason, name: str) -> OperationRow:
    assert row is not None
    if row.stop_reason is not None:
        raise _refuse(row, event, "the first stop reason already won (R6)")
    return replace(row, stop_reason=event.reason)


def _raise_token(row: OperationRow | None, event: RaiseFencingToken, name: str) -> OperationRow:
    assert row is not None
    if event.fencing_token <= row.fencing_token:
        raise _refuse(row, event, "the fencing token only grows")
    return replace(row, fencing_token=event.fencing_token)


def _release(row: OperationRow | None, event: Release, name: str) -> OperationRow:
    assert row is not None
    return replace(row, released=True, result=None)


_HANDLERS: dict[type[Any], Callable[[OperationRow | None, Any, str], OperationRow]] = {
    Admit: _admit,
    Tombstone: _tombstone,
    TakeOver: _take_over,
    LaunchIntent: _launch_intent,
    EndExecution: _end_execution,
    RetryIntent: _retry_intent,
    ConfirmStart: _confirm_start,
    Settle: _settle,
    RecordStopReason: _record_stop,
    RaiseFencingToken: _raise_token,
    Release: _release,
}
