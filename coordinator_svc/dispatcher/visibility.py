"""Why an operation waits, in words (issue 9, PROTOCOL §8.2).

Every non-terminal operation is either moving or visibly waiting for
something: a free slot (with the slot count and how many turns go first), a
backoff, a runner that stopped answering (since when, and the last error).
The answer is built from the dispatcher's memory when an API response is
built (``Operation.waiting_for``); nothing is written to the journal for it,
so a flood of waiting turns costs no commits.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.model import EventRecord, OperationRecord, OpState
from coordinator_svc.core.routing import serves
from coordinator_svc.core.scheduler import Scheduler
from coordinator_svc.driver.runners import Runners
from turnwire.observability.logs import note_turn, turn_extra

# The dispatcher's logger: the transition lines are its own.
log = logging.getLogger("coordinator_svc.dispatcher")


def describe_wait(
    record: OperationRecord,
    scheduler: Scheduler,
    runners: Sequence[RunnerEndpoint],
    *,
    routing: bool,
    retry_at: datetime | None,
    now: datetime,
    memory: Runners,
) -> str:
    if record.state.terminal:
        return ""
    op_id = record.operation_id

    def down(runner: str) -> str:
        """What is wrong with a runner it waits for: silent, or refusing its
        Dispatches as stale (C6c: clock skew, or a path slower than the window)."""
        return "; ".join(
            said for said in (memory.silence(runner), memory.stale_note(runner)) if said
        )

    runner = scheduler.bound_to(op_id) or record.runner
    if record.state is not OpState.QUEUED:
        return down(runner) if runner is not None else ""
    # QUEUED: not bound (C6), so every runner that could take it matters.
    held = scheduler.wait_reason(op_id)
    if held is not None:
        said = held
    elif routing:
        said = f"being routed to runner {runner}"
    elif retry_at is not None and retry_at > now:
        said = f"trying again at {retry_at.isoformat()} (backing off)"
    else:
        said = "waiting to be scheduled"
    serving = [r.name for r in runners if serves(r, record.pool, record.kind)]
    return said + "".join(f"; {d}" for d in map(down, serving) if d)


def note_record(record: OperationRecord) -> None:
    """The turn's log context learns what the record says (attempt, runner, ...)."""
    note_turn(
        record.operation_id,
        attempt=record.attempt_count,
        runner=record.runner,
        incarnation=record.incarnation_id,
        principal=record.principal,
    )


def log_transition(before: OperationRecord, after: OperationRecord, event: EventRecord) -> None:
    """One INFO line per committed transition: what an operator greps for. The
    turn's fields are the committed record's (operation_id, attempt, runner,
    incarnation, principal: turnwire.observability.logs), not repeated in it."""
    if not log.isEnabledFor(logging.INFO):
        return
    log.info(
        "%s %s->%s execution=%s reason=%s %s",
        after.operation_id,
        before.state,
        after.state,
        after.execution,
        event.reason or "-",
        event.detail,
        extra=turn_extra(
            after.operation_id,
            attempt=after.attempt_count,
            runner=after.runner,
            incarnation=after.incarnation_id,
            principal=after.principal,
        ),
    )
