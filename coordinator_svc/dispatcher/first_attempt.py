"""A turn's first attempt written with its acceptance (issue 10; PROTOCOL C1, C2a, C4).

A turn the scheduler would grant the moment it is held, on a runner whose
identity the coordinator's live watch knows (C2a: a first attempt that was
never sent needs no preflight), needs no stop in QUEUED: the write-ahead
attempt the grant would commit right after the acceptance (C4) is decided
now, from the record about to be stored (the driver's rule,
``Driver.first_attempt``), and both writes are queued together here. Where the
journal batches writes (SQLite's group commit, a PostgreSQL pipeline) they
share one transaction, so a turn costs one durable commit less and its
Dispatch leaves one commit sooner.

Nothing here changes what can be durable: the journal can hold the turn
QUEUED (the attempt's write failed or ran alone and lost), or DISPATCHING
with its attempt, exactly the two states the separate writes pass through.
The Dispatch is sent only once the attempt is durable (C4), and only from
the stored record (a replayed key, or a failed submit, stores nothing of
this turn and sends nothing).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from coordinator_svc.core.model import Change, EventRecord, OperationRecord
from coordinator_svc.ports import InvalidWrite, JournalError, Submit

log = logging.getLogger("coordinator_svc.dispatcher")

# Each write's outcome: its value, or the exception it raised.
Submitted = tuple[OperationRecord, bool] | BaseException
Written = OperationRecord | BaseException


async def write_together(
    record: OperationRecord,
    event: EventRecord,
    submit: Submit,
    commit: Callable[[Change], Awaitable[OperationRecord]],
    change: Change,
) -> tuple[Submitted, Written]:
    """The acceptance and the attempt, queued in the same turn of the event loop
    and in that order: where the journal batches writes they share one
    transaction (each still all-or-nothing on its own). Elsewhere they run one
    after the other, and an attempt that runs before its turn exists finds no
    row and writes nothing."""
    submitted, written = await asyncio.gather(
        submit(record, event), commit(change), return_exceptions=True
    )
    return submitted, written


def report_unwritten(op_id: str, submitted: Submitted, written: BaseException) -> None:
    """The attempt did not land. Expected when the submit did not store the turn
    (a replayed key, a failure: its row is missing); else the turn waits QUEUED
    and is scheduled as usual, which an operator should hear of."""
    if not isinstance(submitted, tuple) or submitted[1]:
        return
    bug = not isinstance(written, JournalError | InvalidWrite)
    log.log(
        logging.ERROR if bug else logging.WARNING,
        "%s: its first attempt was not written with its acceptance (%s); it waits QUEUED",
        op_id,
        written,
        exc_info=written if bug else None,
    )


def acceptance_outcome(submitted: Submitted, written: Written) -> tuple[OperationRecord, bool]:
    """What the acceptance returns: the submit's failure, else the record as now
    stored (DISPATCHING when the attempt landed with it)."""
    if isinstance(submitted, BaseException):
        raise submitted
    if isinstance(written, OperationRecord):
        return written, False
    return submitted
