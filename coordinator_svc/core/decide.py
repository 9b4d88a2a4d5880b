"""The coordinator's dispatch state machine: one entry point, one handler per
event kind (PROTOCOL.md §3 C2-C14, replay policies, §6).

Theory of operation. The shell loads an operation's record and attempt rows,
calls :func:`decide` with an event and a :class:`Context` (``now``, timings),
commits the returned Change as a compare-and-set, and only then performs the
returned commands; their replies come back as new events. Everything here is
pure: no clock, no I/O, so every rule is a table-driven unit test.

    event                   handled in
    Tick                    decide_tick.on_tick      (due: route, C8 poll, C9 poll, C10 release)
    Restarted               decide_tick.on_restarted (C12)
    PreflightAnswer/Failed  decide_preflight         (C2, C3, C8, C8a, C9, §6)
    Dispatch*               decide_dispatch          (C5, C6, C7)
    RunnerReported          decide_tick.on_reported  (C9 via the watch stream)
    CancelRequested         decide_cancel.on_requested (C11)
    CancelAnswered/Failed   decide_cancel            (C11, C14)
    ReleaseDone             decide_tick.on_release_done (C10)
    NotAMember              decide_member.on_not_a_member (§11 M6)

A decision that would need an illegal edge raises ``IllegalTransition`` and
changes nothing; a terminal operation never changes state (C10).
"""

from __future__ import annotations

from coordinator_svc.core import (
    decide_cancel,
    decide_dispatch,
    decide_member,
    decide_preflight,
    decide_tick,
)
from coordinator_svc.core.decision import Context, Decision
from coordinator_svc.core.events import (
    CancelAnswered,
    CancelFailed,
    CancelRequested,
    DispatchAccepted,
    DispatchRefused,
    DispatchUnknown,
    Event,
    NotAMember,
    PreflightAnswer,
    PreflightFailed,
    ReleaseDone,
    Restarted,
    RunnerReported,
    Tick,
)
from coordinator_svc.core.model import OperationRecord


def decide(record: OperationRecord, event: Event, ctx: Context) -> Decision:
    """The next step for ``record`` given ``event`` (pure)."""
    match event:
        case Tick():
            return decide_tick.on_tick(record, event, ctx)
        case Restarted():
            return decide_tick.on_restarted(record, ctx)
        case PreflightAnswer():
            return decide_preflight.on_answer(record, event, ctx)
        case PreflightFailed():
            return decide_preflight.on_failed(record, event, ctx)
        case DispatchAccepted():
            return decide_dispatch.on_accepted(record, event, ctx)
        case DispatchRefused():
            return decide_dispatch.on_refused(record, event, ctx)
        case DispatchUnknown():
            return decide_dispatch.on_unknown(record, event, ctx)
        case RunnerReported():
            return decide_tick.on_reported(record, event, ctx)
        case CancelRequested():
            return decide_cancel.on_requested(record, ctx)
        case CancelAnswered():
            return decide_cancel.on_answered(record, event, ctx)
        case CancelFailed():
            return decide_cancel.on_failed(record, event, ctx)
        case ReleaseDone():
            return decide_tick.on_release_done(record, ctx)
        case NotAMember():
            return decide_member.on_not_a_member(record, event, ctx)
    raise TypeError(f"unknown event {event!r}")  # pragma: no cover - Event is closed
