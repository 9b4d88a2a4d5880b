"""Why a turn did not succeed, in words: the demo's and chaos's explanation rows.

A run under injected faults ends some turns ``TIMED_OUT`` or with execution
``UNKNOWN``, and a reader who sees "52 SUCCEEDED, 8 TIMED_OUT" deserves to know
why each of the 8 is the true answer rather than a failure of the promise.
``explain`` groups the turns that did not succeed by (state, reason,
execution), names the PROTOCOL.md rule that decided them, and sets beside each
group what the metered ledger (which the coordinator never reads) says: how
many of them really started an executor. For ``UNKNOWN`` that count is the
point: the coordinator could not know, and the ledger shows it was right not
to guess.

Pure: it reads the oracle's records (``turnwire.harness.oracle_history``).
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from turnwire.harness.oracle_history import OperationHistory
from turnwire.harness.oracle_schema import REFUSED, TERMINAL_STATES, UNKNOWN

# (reason, execution) -> why that is the honest ending; "*" matches any execution.
_WHY: dict[tuple[str, str], str] = {
    ("INTERRUPTED", "STARTED"): (
        "the runner process died while the executor ran (R10 ends its process group "
        "with it); it started once and whatever it did stands, so it is never run again"
    ),
    ("INTERRUPTED", "UNKNOWN"): (
        "the runner process died after the launch intent and before the start was "
        "confirmed (R3): the executor may or may not have started, so it is not run again"
    ),
    ("INCARNATION_CHANGED", "UNKNOWN"): (
        "a Dispatch may have reached the runner just before it was killed, and the "
        "restarted runner's store cannot prove it never ran (its admission floor had not "
        "passed the Dispatch's stamp, §6.1): never sent again (C8)"
    ),
    ("INCARNATION_CHANGED", "NOT_STARTED"): (
        "the runner restarted while the turn was unresolved; a Cancel's tombstone on the "
        "new incarnation proved it never ran there (C8b, C14)"
    ),
    ("INCARNATION_CHANGED", "STARTED"): (
        "the runner confirmed the start, then restarted before reporting an outcome (C9)"
    ),
    ("RECONCILE_DEADLINE", "*"): (
        "the bound runner stayed unreachable past the reconcile deadline, so nobody can "
        "say more (C8)"
    ),
    ("MAX_ATTEMPTS_EXCEEDED", "*"): "another attempt would have exceeded max_attempts (C6)",
    ("DEADLINE_EXCEEDED", "*"): "the turn's own deadline passed (C6a)",
    ("QUEUE_TIMEOUT", "*"): "it waited QUEUED past its queue timeout and never started (C6a)",
    ("BUDGET_EXHAUSTED", "*"): "its run-time budget ran out and the runner stopped it (R6)",
    ("HEARTBEAT_TIMEOUT", "*"): (
        "the executor stopped heartbeating within its heartbeat timeout and the runner "
        "stopped it (R12)"
    ),
    ("EXECUTOR_FAILED", "*"): "the executor ran and reported a failure",
    ("CANCELLED", "*"): "its principal cancelled it (C11)",
    ("SHUTDOWN", "*"): "the runner was draining and stopped it (R8)",
    ("DISPATCH_REJECTED", "*"): "the runner refused the envelope for good (C6)",
    ("DISPATCH_STALE", "*"): (
        "its runner refused a run of Dispatches as stale, never admitting one (C6c): its "
        "clock runs ahead of the coordinator's, or Dispatches reach it later than its "
        "admission window; the event says which"
    ),
    ("ACKNOWLEDGED_OPERATION_DISAPPEARED", "*"): (
        "the runner acknowledged it and later did not know it: a broken runner (C9)"
    ),
}

ASK_THE_OPERATOR = "an operator can record a verdict: turnwire admin ambiguous"


@dataclass(frozen=True)
class OutcomeGroup:
    """Turns that ended the same way, and what the ledger says of them."""

    state: str
    reason: str
    execution: str
    count: int
    started_in_ledger: int  # of ``count``, how many have a ledger line (an executor start)

    @property
    def why(self) -> str:
        return (
            _WHY.get((self.reason, self.execution))
            or _WHY.get((self.reason, "*"))
            or "see the operation's events (turnwire get OP --json)"
        )

    def render(self) -> str:
        """Two or more lines: what and how many (with the ledger's count), then why."""
        label = f"{self.count} {self.state}"
        if self.reason:
            label += f" {self.reason}"
        label += f", execution {self.execution}"
        label += f" (the ledger shows {self.started_in_ledger} of {self.count} started)"
        why = self.why + ("; " + ASK_THE_OPERATOR if self.execution == "UNKNOWN" else "")
        body = textwrap.fill(why, width=88, initial_indent="    ", subsequent_indent="    ")
        return f"  {label}\n{body}"


def _bare(reason: str | None) -> str:
    return (reason or "").removeprefix("ERROR_REASON_")


def unknown_never_executed(histories: Iterable[OperationHistory], reason: str = "") -> int:
    """Terminal operations left with execution UNKNOWN although the metered ledger
    shows no executor start for them (only those that ended for ``reason``, when
    given). For INCARNATION_CHANGED this is the ambiguity a runner's SIGKILL leaves
    when its admission floor had not passed a Dispatch's stamp (§6.1 W2a keeps that
    window to half a second), or when a first attempt went to a runner already dead
    (C2a keeps the skip to runners heard from lately): issue 27's count, 0 wanted."""
    return sum(
        1
        for h in histories
        if h.operation.state in TERMINAL_STATES
        and h.operation.execution == UNKNOWN
        and not h.ledger
        and (not reason or _bare(h.operation.error_reason) == reason)
    )


def stale_refusals(histories: Iterable[OperationHistory]) -> int:
    """Attempts a runner refused DISPATCH_STALE (C6c): each was never admitted, and
    the turn was sent again with a fresh stamp. The cost of a short admission window."""
    return sum(
        1
        for h in histories
        for attempt in h.attempts
        if attempt.outcome == REFUSED and attempt.detail.startswith("DISPATCH_STALE")
    )


def explain(histories: Iterable[OperationHistory]) -> tuple[OutcomeGroup, ...]:
    """One group per (state, reason, execution) among terminal turns that did not succeed."""
    counts: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for history in histories:
        operation = history.operation
        if operation.state == "SUCCEEDED":
            continue
        key = (operation.state, _bare(operation.error_reason), operation.execution)
        counts[key][0] += 1
        counts[key][1] += 1 if history.ledger else 0
    return tuple(
        OutcomeGroup(state, reason, execution, count, started)
        for (state, reason, execution), (count, started) in sorted(
            counts.items(), key=lambda item: (-item[1][0], item[0])
        )
    )


def render_explanation(groups: Iterable[OutcomeGroup]) -> str:
    """The lines under the demo's table ("" when every turn succeeded)."""
    groups = tuple(groups)
    if not groups:
        return ""
    total = sum(group.count for group in groups)
    heading = (
        f"why {total} turn(s) did not succeed (each is the true answer; none was retried blindly):"
    )
    return "\n".join([heading, *(group.render() for group in groups)])
