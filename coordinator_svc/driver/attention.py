"""Who looks at an operation, and when: the rules around the step that decide
whether the due scan may tick an operation (issue 26: these were
the engine's own, outside the core and outside the simulation's reach).

Each takes what this process knows of the operation (its memory record, and
the shell's facts: a Dispatch reply on the way, the scheduler holding it)
and answers yes or no; none reads a clock or performs anything.
"""

from __future__ import annotations

from datetime import datetime

from coordinator_svc.core.model import OperationRecord, OpState
from coordinator_svc.driver.memory import OperationMemory

# States in which a cancel another replica stored (§5 O5: a mark, nothing
# sent) waits for the owner to act on it at once.
CANCEL_MARKED_STATES = (OpState.QUEUED, OpState.RUNNING, OpState.DISPATCH_UNKNOWN)


def waits_for_its_time(known: OperationMemory, now: datetime) -> bool:
    """A later time is set for it (a backoff, a ScheduleAt): its own timer ticks it."""
    return known.not_before is not None and known.not_before > now


def due_scan_ticks(
    record: OperationRecord,
    known: OperationMemory,
    now: datetime,
    *,
    owner: str | None,
    dispatching: bool,
    held: bool,
) -> bool:
    """Whether the due scan (the fallback for timers lost to a race or a
    restart) ticks ``record``, found due in the journal.

    Not when something else looks after it: another replica's lease (``owner``
    is this replica's lease owner; None: the journal's only coordinator),
    whose keeper adopts it if it lapses (O3); its own timer still waiting; a
    Dispatch reply on the way (``dispatching``); the scheduler holding it
    (``held``) or a grant routing it (C6). A cancel another replica stored
    is acted on now, whatever waits (O5: the mark leaves the rest to us)."""
    if owner is not None:
        if record.lease_owner != owner:
            return False
        if record.cancel_requested and record.state in CANCEL_MARKED_STATES:
            return True
    return not (waits_for_its_time(known, now) or dispatching or held or known.routing)
