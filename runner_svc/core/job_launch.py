"""How a job gets from its admission to its executor's start (R3), two ways.

A job admitted alone (``Phase.ADMITTED``) reads its row under the operation's
lock (``LaunchChecked``) and, if nothing blocks the launch, asks for its launch
intent (``WriteLaunchIntent``); the executor starts once the intent is durable.

A job admitted with its intent (``Phase.READY``: the admission's own commit
carried it, issue 27) has nothing to check or write: the admission decided
the launch check would pass (core/admission.py, ``launches_at_once``), and the
row has been this incarnation's LAUNCHING row ever since. Its run begins with
``StartDue``: the executor starts unless a stop came first (a Cancel or the
drain since the admission, the deadline passed meanwhile). A stopped READY job
never starts: its row settles with the stop, NOT_STARTED. That is C14's proof
as much as a never-launched row settled as cancelled: the row can no longer
change, and the incarnation that wrote it holds the intent and knows it asked
no executor to start. (After a crash nobody knows that: the row reads
INTERRUPTED, UNKNOWN, R3, never NOT_STARTED.)

Part of the machine in core/job_lifecycle.py, which dispatches both events here.
"""

from __future__ import annotations

from dataclasses import replace

from runner_svc.core.job_events import (
    FreeSlot,
    LaunchChecked,
    NoteNotLaunched,
    StartDue,
    StartExecutor,
    WriteLaunchIntent,
)
from runner_svc.core.job_state import JobState, Phase, Step, settle
from runner_svc.core.model import Execution, RowState
from runner_svc.core.settlement import (
    due_stop_reason,
    first_stop_reason,
    launch_block,
    unlaunched_settlement,
)


def launch_checked(state: JobState, event: LaunchChecked) -> Step:
    """R3's launch check: launch only an ACCEPTED row of ours that nothing stopped."""
    if state.phase not in (Phase.ADMITTED, Phase.SETTLED):
        return state, ()
    state = _late(state, event.now)
    row = event.row
    block = launch_block(row, state.incarnation_id, state.stop_reason)
    if state.phase is Phase.SETTLED:
        # A Cancel settled the job before its check ran: nothing is left to do.
        return state, (NoteNotLaunched(block or "it was settled before its launch check"),)
    if not block:
        return replace(state, phase=Phase.LAUNCHING, execution_number=1), (WriteLaunchIntent(),)
    note = NoteNotLaunched(block)
    reason = state.stop_reason or (row.stop_reason if row is not None else None)
    if row is not None and row.state is RowState.ACCEPTED and reason is not None:
        # Stopped before its launch intent: it provably never started (C14).
        settling = replace(state, phase=Phase.SETTLING)
        settled, commands = settle(settling, unlaunched_settlement(reason), Execution.NOT_STARTED)
        return settled, (note, *commands)
    # The row is gone, settled, or not ours: nothing of ours launched, so
    # there is nothing to settle and the slot is free again.
    return replace(state, phase=Phase.RELEASED), (note, FreeSlot())


def start_due(state: JobState, event: StartDue) -> Step:
    """R3, R4: the intent the admission wrote is durable; start the executor, unless
    a stop came first: then the row settles with it, NOT_STARTED, and nothing starts."""
    if state.phase is Phase.SETTLED:
        # A Cancel settled the job before its start: nothing is left to do.
        return state, (NoteNotLaunched("it was settled before its start"),)
    if state.phase is not Phase.READY:
        return state, ()
    state = _late(state, event.now)
    if state.stop_reason is None:
        return replace(state, phase=Phase.STARTING), (StartExecutor(),)
    note = NoteNotLaunched(f"stop reason {state.stop_reason} came before its start")
    settling = replace(state, phase=Phase.SETTLING)
    decision = unlaunched_settlement(state.stop_reason)
    settled, commands = settle(settling, decision, Execution.NOT_STARTED)
    return settled, (note, *commands)


def _late(state: JobState, now: float) -> JobState:
    """A deadline that passed while the job waited blocks the launch (or the start).
    It is kept in memory only: the unlaunched settlement says what stopped it."""
    due = due_stop_reason(now=now, deadline=state.deadline, started_at=None, budget_seconds=None)
    if due is None:
        return state
    return replace(state, stop_reason=first_stop_reason(state.stop_reason, due))
