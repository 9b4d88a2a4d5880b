"""The coordinator's spans about a turn (issue 13, docs/TRACING.md).

Every span here is a child of the call that submitted the turn (the trace
context its envelope carries, ``turnwire.observability.tracing``), whichever
task makes it and however long after SubmitTurn: a preflight, a Dispatch
(whose RPC carries the span on to the runner), a Cancel, each journal commit,
and the settlement (the commit that makes the turn terminal). While tracing
is off each is a shared no-op context: nothing is built.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.model import Change, OperationRecord
from turnwire.observability import tracing

_OFF: AbstractContextManager[None] = contextlib.nullcontext()


def command_span(record: OperationRecord, command: cmd.Command) -> AbstractContextManager[object]:
    """A span around the runner call a command makes (preflight, dispatch, cancel)."""
    if not tracing.enabled():
        return _OFF
    op_id, envelope = record.operation_id, record.envelope
    match command:
        case cmd.Preflight(runner=runner):
            return tracing.turn_span(
                "turnwire.preflight", op_id, envelope, runner=runner, attempts=record.attempt_count
            )
        case cmd.Dispatch():
            return tracing.turn_span(
                "turnwire.dispatch",
                op_id,
                envelope,
                runner=command.runner,
                attempt=command.attempt,
                incarnation_id=command.incarnation_id,
                fencing_token=command.fencing_token,
            )
        case cmd.Cancel():
            return tracing.turn_span(
                "turnwire.cancel",
                op_id,
                envelope,
                runner=command.runner,
                incarnation_id=command.incarnation_id,
                give_up=command.give_up.reason if command.give_up is not None else "",
            )
    return _OFF


def commit_span(change: Change) -> AbstractContextManager[object]:
    """A span around one journal commit; the terminal one inside a settle span."""
    if not tracing.enabled():
        return _OFF
    before, after = change.before, change.after
    op_id, envelope = after.operation_id, after.envelope
    attributes: dict[str, str | int] = {
        "from_state": str(before.state),
        "to_state": str(after.state),
        "attempts": after.attempt_count,
    }
    if not after.state.terminal or before.state.terminal:
        return tracing.turn_span("turnwire.journal.commit", op_id, envelope, **attributes)
    spans = contextlib.ExitStack()
    spans.enter_context(
        tracing.turn_span(
            "turnwire.settle",
            op_id,
            envelope,
            state=str(after.state),
            execution=str(after.execution),
            stop_reason=str(after.stop_reason or ""),
            error_reason=after.error_reason or "",
        )
    )
    spans.enter_context(tracing.span("turnwire.journal.commit", op_id, **attributes))
    return spans
