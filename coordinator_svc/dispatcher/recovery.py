"""What a coordinator does with the journal when it starts (C12), and the watch's
look-up of the operations bound to a runner (C9)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from coordinator_svc.core.events import Event, Restarted
from coordinator_svc.core.model import OperationRecord, OpState
from coordinator_svc.dispatcher.waiting_room import WaitingRoom
from coordinator_svc.ports import Journal

RECOVERY_PAGE = 500
MAX_RECOVERY_PAGES = 10_000

# ``Operations.step``: one driver step (load, decide, commit); the step, or None if unknown.
StepFunction = Callable[[str, Event], Awaitable[Any]]


async def recover(journal: Journal, step: StepFunction, room: WaitingRoom) -> None:
    """C12: every DISPATCHING row becomes DISPATCH_UNKNOWN (bounded pages); the
    scheduler learns what is bound where; every QUEUED turn waits for a grant again
    (a backoff does not survive a restart)."""
    for _ in range(MAX_RECOVERY_PAGES):
        rows = await journal.in_state(OpState.DISPATCHING, RECOVERY_PAGE)
        progressed = False
        for record in rows:
            done = await step(record.operation_id, Restarted())
            progressed |= done is not None and done.record.state is not OpState.DISPATCHING
        if not rows or not progressed:
            break
    for state in (OpState.DISPATCH_UNKNOWN, OpState.RUNNING, OpState.CANCELLING):
        for record in await journal.in_state(state, 100_000):
            room.occupancy.note(record.operation_id, record.principal, record.state)
            if record.runner is not None:
                room.scheduler.bind(record.operation_id, record.runner, record.kind)
    for record in await journal.in_state(OpState.QUEUED, 1_000_000):
        room.hold(record)


async def bound_to(
    journal: Journal, runner: str, states: Sequence[OpState], other_than: str | None = None
) -> list[OperationRecord]:
    """Non-terminal operations bound to ``runner`` (for the watch's C9 checks);
    with ``other_than``, only those bound to another incarnation of it."""
    found: list[OperationRecord] = []
    for state in states:
        found += await journal.bound_to(runner, state, 100_000, other_than=other_than)
    return found
