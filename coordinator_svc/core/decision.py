"""The output of a decide function, and the few builders every rule shares.

A :class:`Decision` is an instruction list in the h11/Restate style: the
:class:`~coordinator_svc.core.model.Change` to commit (compare-and-set), then
the commands to perform once it is committed. A decision without a change
performs its commands directly (a status call needs no write ahead).

Builders here enforce the protocol's bookkeeping so the rules need not:
every state change is a legal edge (``core.edges``, raises
``IllegalTransition`` and changes nothing otherwise) with its event (C13);
reaching QUEUED, RUNNING or an end clears ``unknown_since``; a terminal
write sets ``finished_at`` and clears the schedule (C10).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict, Unpack

from coordinator_svc.core.commands import Command
from coordinator_svc.core.edges import assert_legal
from coordinator_svc.core.model import (
    AttemptOutcome,
    AttemptRecord,
    AttemptUpdate,
    Change,
    EventRecord,
    Execution,
    OperationRecord,
    OpState,
    StopReason,
)
from turnwire.backoff import backoff_seconds
from turnwire.vocabulary import ErrorReason


@dataclass(frozen=True)
class Context:
    """Everything a decision may depend on besides the record and the event.

    No clock and no I/O in the core: ``now`` and the attempt rows come in here.
    """

    now: datetime
    attempts: tuple[AttemptRecord, ...] = ()
    backoff_initial: float = 0.05
    backoff_max: float = 2.0
    reconcile_deadline: float = 30.0
    dispatch_timeout: float = 5.0
    # How long a RUNNING/CANCELLING operation waits between fallback status
    # polls (the watch stream normally reports first).
    status_poll: float = 5.0
    # C9a: the poll of a RUNNING turn a live watch follows (None: not followed).
    # Only a RUNNING turn with no cancel waits this long; a CANCELLING one is
    # polled, and its Cancel asked again, every status_poll.
    watched_status_poll: float | None = None
    replica_id: str = ""
    lease_ttl: float = 15.0
    # The turn's own deadline (its envelope's limits), if it has one: a turn
    # still QUEUED when it passes ends TIMED_OUT, NOT_STARTED (issue 9).
    turn_deadline: datetime | None = None
    # When the turn's queue timeout runs out (accepted + queue timeout): a
    # turn still QUEUED then ends TIMED_OUT, QUEUE_TIMEOUT, NOT_STARTED.
    queue_deadline: datetime | None = None


@dataclass(frozen=True)
class Decision:
    """What to commit, then what to do."""

    change: Change | None = None
    commands: tuple[Command, ...] = ()
    # Decide again right after the commit (a Tick on the stored record):
    # used where one event needs two steps, e.g. RUNNING then CANCELLING.
    again: bool = False
    # Metric tags: "replay", "reconciled", "ambiguous", "alarm".
    tags: frozenset[str] = frozenset()
    # Why nothing happened, for the log.
    note: str = ""

    @property
    def after(self) -> OperationRecord | None:
        return self.change.after if self.change is not None else None


NOTHING = Decision()


def nothing(note: str, *commands: Command) -> Decision:
    return Decision(commands=tuple(commands), note=note)


def backoff(ctx: Context, streak: int) -> timedelta:
    """Exponential backoff, capped (C6, C8)."""
    return timedelta(
        seconds=backoff_seconds(streak, initial=ctx.backoff_initial, cap=ctx.backoff_max)
    )


class Binding(TypedDict, total=False):
    """Which runner incarnation (and store) the operation is bound to (C6)."""

    runner: str | None
    incarnation_id: str | None
    store_id: str | None
    acknowledged: bool


class Started(TypedDict, total=False):
    """A confirmed start to record (R3, C14)."""

    execution: Execution


class ExecutionRecords(TypedDict, total=False):
    """The runner's execution records when they changed (R15: a serialized
    ExecutionLog, and how many it holds)."""

    executions: bytes | None
    execution_count: int


class StartedAndRecords(Started, ExecutionRecords, total=False):
    """What an unsettled row on the bound incarnation adds to a write (R3, R15)."""


class StopRequest(TypedDict, total=False):
    """A stop asked for (C11, R6: the first stop reason wins)."""

    cancel_requested: bool
    stop_reason: StopReason | None


class RecordChanges(Binding, Started, ExecutionRecords, StopRequest, total=False):
    """What a decision may change on a record besides its state, typed: a
    misspelt field or a wrong type is a mypy error at the rule that wrote it.
    Everything else (identity, envelope, version, fencing) is the journal's or
    fixed at acceptance (storage.rules refuses a change to those). The parts
    above are the groups rules pass around; mypy refuses a group that could
    set a field the same call also sets by name."""

    attempt_count: int
    last_attempt_at: datetime | None
    result: bytes | None
    error_reason: str | None
    error_message: str | None
    next_action_at: datetime | None
    unknown_since: datetime | None
    released: bool
    finished_at: datetime | None


def _lease_fields(record: OperationRecord, ctx: Context) -> dict[str, Any]:
    """Single-replica mode: the lease rides on every state commit (§5)."""
    if not ctx.replica_id:
        return {}
    return {
        "lease_owner": ctx.replica_id,
        "lease_expires_at": ctx.now + timedelta(seconds=ctx.lease_ttl),
    }


def transition(
    record: OperationRecord,
    to: OpState,
    ctx: Context,
    *,
    reason: str = "",
    detail: str = "",
    new_attempt: AttemptRecord | None = None,
    attempt_updates: tuple[AttemptUpdate, ...] = (),
    **fields: Unpack[RecordChanges],
) -> Change:
    """A state change with its event; raises IllegalTransition if not an edge."""
    assert_legal(record.operation_id, record.state, to)
    extra: dict[str, Any] = {"next_action_at": None} if to.terminal else {}
    if to.terminal:
        extra["finished_at"] = ctx.now
    # The ambiguity (and its reconcile deadline) ends once the runner
    # acknowledged the operation, it went back to QUEUED, or it ended; an
    # unacknowledged CANCELLING is still ambiguous.
    if to in (OpState.QUEUED, OpState.RUNNING) or to.terminal:
        extra["unknown_since"] = None
    sequence = record.last_event_sequence + 1
    after = dataclasses.replace(
        record,
        state=to,
        updated_at=ctx.now,
        last_event_sequence=sequence,
        **{**_lease_fields(record, ctx), **extra, **fields},
    )
    event = EventRecord(
        operation_id=record.operation_id,
        sequence=sequence,
        from_state=record.state,
        to_state=to,
        execution=after.execution,
        at=ctx.now,
        reason=reason,
        detail=detail,
    )
    return Change(record, after, event, new_attempt, attempt_updates)


def bookkeeping(
    record: OperationRecord,
    ctx: Context,
    *,
    attempt_updates: tuple[AttemptUpdate, ...] = (),
    **fields: Unpack[RecordChanges],
) -> Change:
    """A write that changes no state (cancel flag, released flag, rebinding)."""
    after = dataclasses.replace(
        record, updated_at=ctx.now, **{**_lease_fields(record, ctx), **fields}
    )
    return Change(record, after, None, None, attempt_updates)


def with_updates(
    attempts: tuple[AttemptRecord, ...], updates: tuple[AttemptUpdate, ...]
) -> tuple[AttemptRecord, ...]:
    """The attempt rows as they will be once ``updates`` are committed."""
    by_number = {update.number: update for update in updates}
    return tuple(
        dataclasses.replace(
            a, outcome=by_number[a.number].outcome, detail=by_number[a.number].detail
        )
        if a.number in by_number
        else a
        for a in attempts
    )


def close_current(
    record: OperationRecord, outcome: AttemptOutcome, detail: str = ""
) -> tuple[AttemptUpdate, ...]:
    """Close the latest attempt (the one a reply or a restart speaks for)."""
    if record.attempt_count == 0:
        return ()
    return (AttemptUpdate(record.attempt_count, outcome, detail),)


# A refusal that says only "full right now" (issue 9): it proves the attempt
# did not run (C6) and says nothing against the turn, so it never counts
# toward max_attempts and never fails a turn.
CAPACITY_REFUSALS = frozenset({ErrorReason.NO_FREE_SLOT, ErrorReason.SHUTTING_DOWN})
# C6c: never admitted because it reached the runner after its admission floor
# (late, or the runner's clock runs ahead): nothing ran, nothing against the turn.
STALE_REFUSALS = frozenset({ErrorReason.DISPATCH_STALE})
# Refusals that never count toward max_attempts: a full runner's (C6a), a stale
# Dispatch's (C6c), and a Dispatch never sent because its runner is not a member
# (§11 M6).
UNCOUNTED_REFUSALS = CAPACITY_REFUSALS | STALE_REFUSALS | {ErrorReason.RUNNER_REMOVED}


def refusal_reason(attempt: AttemptRecord) -> str:
    """The typed reason a REFUSED attempt was closed with ("" otherwise)."""
    if attempt.outcome is not AttemptOutcome.REFUSED:
        return ""
    return attempt.detail.split(":", 1)[0].strip()


def counted_attempts(attempts: tuple[AttemptRecord, ...]) -> int:
    """Attempts that count toward max_attempts: all but capacity refusals and
    Dispatches never sent (§11 M6)."""
    return sum(refusal_reason(a) not in UNCOUNTED_REFUSALS for a in attempts)


def _streak(attempts: tuple[AttemptRecord, ...], reasons: frozenset[str]) -> int:
    streak = 0
    for attempt in sorted(attempts, key=lambda a: a.number, reverse=True):
        if refusal_reason(attempt) not in reasons:
            break
        streak += 1
    return streak


def capacity_streak(attempts: tuple[AttemptRecord, ...]) -> int:
    """How many attempts in a row, most recent first, a full runner refused."""
    return _streak(attempts, CAPACITY_REFUSALS)


def stale_streak(attempts: tuple[AttemptRecord, ...]) -> int:
    """How many attempts in a row, most recent first, were refused DISPATCH_STALE (C6c)."""
    return _streak(attempts, STALE_REFUSALS)


def all_refused(attempts: tuple[AttemptRecord, ...]) -> bool:
    """C6: no attempt could have been accepted (vacuously true for none)."""
    return all(a.outcome is AttemptOutcome.REFUSED for a in attempts)


def settled_stop_reason(
    to: OpState, stopped_by: StopReason | None, asked: StopReason | None
) -> StopReason | None:
    """R6/C11: the stop reason a terminal operation reports is the one that stopped it.

    ``stopped_by`` is what the runner's settled row says stopped it; ``asked``
    the stop the coordinator recorded when it was requested. A turn that
    finished on its own (SUCCEEDED, or failed by itself) reports none, even if
    a stop was asked for: ``cancel_requested`` shows a cancel that lost the
    race. A CANCELLED the runner did not explain (a tombstone, or no runner
    at all) was stopped by the stop that was asked for.
    """
    if to is OpState.SUCCEEDED:
        return None
    if stopped_by is not None:
        return stopped_by
    if to is OpState.CANCELLED:
        return asked or StopReason.CANCEL
    return None
