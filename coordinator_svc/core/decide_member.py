"""A command for a runner that is not a member of the runner set (PROTOCOL.md §11 M6).

The shell sends nothing to a runner the journal's set does not hold (removed,
by force or after a drain, or never added) and answers the command with
``NotAMember``. No answer about the operation can come from that runner any
more, so:

    Dispatch written ahead, not sent   -> the attempt is closed refused
                                          (RUNNER_REMOVED, not counted, C6a):
                                          QUEUED if nothing else was sent (it
                                          routes elsewhere), else DISPATCH_UNKNOWN
    bound: DISPATCH_UNKNOWN, RUNNING,  -> TIMED_OUT RUNNER_REMOVED now, execution
      CANCELLING                          as C14 joins it: STARTED if confirmed,
                                          else UNKNOWN; never sent to another
                                          runner (C6), no C8b Cancel (none can go)
    terminal, a Release owed           -> recorded released, not sent: the
                                          runner's row is one nobody releases (K6)
    QUEUED (a grant to it raced the    -> nothing: it waits for a grant again
      removal)
"""

from __future__ import annotations

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.attempting import end
from coordinator_svc.core.decide_dispatch import on_refused
from coordinator_svc.core.decision import Context, Decision, bookkeeping, nothing
from coordinator_svc.core.events import DispatchRefused, NotAMember
from coordinator_svc.core.model import OperationRecord, OpState
from turnwire.vocabulary import ErrorReason

REMOVED = ErrorReason.RUNNER_REMOVED
_KINDS: dict[type, str] = {
    cmd.Preflight: "status",
    cmd.Dispatch: "dispatch",
    cmd.Cancel: "cancel",
    cmd.Release: "release",
}


def not_a_member(record: OperationRecord, command: cmd.Command) -> NotAMember | None:
    """What a shell answers for ``command`` when its runner is not a member (M6):
    nothing is sent. None for a command that goes to no runner."""
    runner = getattr(command, "runner", None)
    kind = _KINDS.get(type(command))
    if runner is None or kind is None:
        return None
    return NotAMember(runner, kind, record.attempt_count, record.last_event_sequence)


def on_not_a_member(record: OperationRecord, ev: NotAMember, ctx: Context) -> Decision:
    why = f"runner {ev.runner} is not a member of the runner set (§11 M6)"
    if record.state.terminal:
        if record.released or ev.command != "release" or ev.runner != record.runner:
            return nothing("terminal")
        change = bookkeeping(record, ctx, released=True)
        return Decision(change, note=f"{why}: the Release is not sent (its row stays, K6)")
    if record.state is OpState.QUEUED or ev.runner != record.runner:
        return nothing(f"{why}: not bound to it; waits for a grant")
    if ev.asked_attempt != record.attempt_count:
        return nothing(f"{why}: asked before a later attempt")
    if record.state is OpState.DISPATCHING:
        if ev.command != "dispatch":
            return nothing("a Dispatch is in flight; its reply decides")
        # Written ahead (C4) but never sent by this process: definitely not
        # accepted anywhere, and no fault of the turn's.
        refusal = DispatchRefused(ev.asked_attempt, REMOVED, message=f"{why}: nothing sent")
        return on_refused(record, refusal, ctx)
    if ev.asked_sequence is not None and ev.asked_sequence != record.last_event_sequence:
        return nothing(f"{why}: asked before the latest transition (C8a)")
    return end(
        record,
        ctx,
        OpState.TIMED_OUT,
        REMOVED,
        f"{why}: no answer about this turn can come; it may have run there",
    )
