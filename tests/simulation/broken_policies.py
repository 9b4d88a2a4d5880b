"""Deliberately broken dispatch policies: wrappers around the core's decide.

Each one reintroduces a classic mistake the protocol exists to prevent. The
teeth tests assert the invariant checker catches every one within the CI
budget, so a simulator that checks nothing cannot pass. The core is never
edited: each breakage rewrites the event going in or the decision coming out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from coordinator_svc.core.attempting import write_ahead
from coordinator_svc.core.commands import Dispatch
from coordinator_svc.core.decide import decide
from coordinator_svc.core.decision import Context, Decision
from coordinator_svc.core.events import (
    DispatchRefused,
    DispatchUnknown,
    Event,
    NotAMember,
    PreflightAnswer,
    Tick,
)
from coordinator_svc.core.model import (
    Change,
    Execution,
    OperationRecord,
    OpState,
    ReplayPolicy,
)
from coordinator_svc.core.witness import StoreOpen
from tests.simulation.sim_coordinator import Policy
from tests.simulation.simulator import Simulator


def _restore_policy(decision: Decision, policy: ReplayPolicy) -> Decision:
    """Put the operation's real replay policy back into the change."""
    change = decision.change
    if change is None:
        return decision
    fixed = Change(
        dataclasses.replace(change.before, replay_policy=policy),
        dataclasses.replace(change.after, replay_policy=policy),
        change.event,
        change.new_attempt,
        change.attempt_updates,
    )
    return dataclasses.replace(decision, change=fixed)


def replay_after_changed_incarnation(sim: Simulator) -> Policy:
    """Breaks C8: a changed incarnation is taken as absence, and replayed to."""

    def policy(record: OperationRecord, event: Event, ctx: Context) -> Decision:
        changed = (
            isinstance(event, PreflightAnswer)
            and record.state is OpState.DISPATCH_UNKNOWN
            and event.incarnation_id != record.incarnation_id
        )
        if not changed:
            return decide(record, event, ctx)
        pretend = dataclasses.replace(record, replay_policy=ReplayPolicy.SAFE)
        return _restore_policy(decide(pretend, event, ctx), record.replay_policy)

    return policy


def timeout_is_refusal(sim: Simulator) -> Policy:
    """Breaks C7: a Dispatch that got no answer is treated as refused."""

    def policy(record: OperationRecord, event: Event, ctx: Context) -> Decision:
        if isinstance(event, DispatchUnknown):
            event = DispatchRefused(event.attempt, "NO_FREE_SLOT", message="(was a timeout)")
        return decide(record, event, ctx)

    return policy


def skip_preflight(sim: Simulator) -> Policy:
    """Breaks C2/C8: resolve DISPATCH_UNKNOWN by replaying at once to the
    runner's current incarnation (from a cached runner view), with no status call."""

    def policy(record: OperationRecord, event: Event, ctx: Context) -> Decision:
        cached = sim.runners.get(record.runner or "")
        if (
            isinstance(event, Tick)
            and record.state is OpState.DISPATCH_UNKNOWN
            and not record.cancel_requested
            and cached is not None
        ):
            return write_ahead(
                record,
                ctx,
                runner=cached.name,
                incarnation_id=cached.incarnation_id,
                store_id=cached.store.store_id,
                why="no preflight",
            )
        return decide(record, event, ctx)

    return policy


def unknown_is_not_started(sim: Simulator) -> Policy:
    """Breaks C14: an ambiguous ending is billed as NOT_STARTED."""

    def policy(record: OperationRecord, event: Event, ctx: Context) -> Decision:
        decision = decide(record, event, ctx)
        change = decision.change
        if change is None or not change.after.state.terminal:
            return decision
        if change.after.execution is not Execution.UNKNOWN:
            return decision
        return _billed_not_started(decision)

    return policy


def _billed_not_started(decision: Decision) -> Decision:
    """The decision with its change (and event) saying execution NOT_STARTED."""
    change = decision.change
    assert change is not None
    after = dataclasses.replace(change.after, execution=Execution.NOT_STARTED)
    event_record = change.event
    if event_record is not None:
        event_record = dataclasses.replace(event_record, execution=Execution.NOT_STARTED)
    return dataclasses.replace(
        decision, change=dataclasses.replace(change, after=after, event=event_record)
    )


def dispatch_without_write_ahead(sim: Simulator) -> Policy:
    """Breaks C4: the first Dispatch is sent without committing its attempt row."""

    def policy(record: OperationRecord, event: Event, ctx: Context) -> Decision:
        decision = decide(record, event, ctx)
        change = decision.change
        if change is None or change.new_attempt is None or change.new_attempt.number != 1:
            return decision
        sends = tuple(c for c in decision.commands if isinstance(c, Dispatch))
        return Decision(commands=sends, note="sent without write-ahead")

    return policy


def trust_the_store_blindly(sim: Simulator) -> Policy:
    """Breaks the §6 witness (issue 8.1): a durable store's chain is read as if
    every earlier incarnation had sealed it, so a restored store vouches."""

    def policy(record: OperationRecord, event: Event, ctx: Context) -> Decision:
        if isinstance(event, PreflightAnswer) and event.durable:
            sealed = tuple(
                StoreOpen(event.incarnation_id, attempt.incarnation_id, 2**63 - 1)
                for attempt in ctx.attempts
            )
            event = dataclasses.replace(event, store_opens=sealed)
        return decide(record, event, ctx)

    return policy


def resend_when_the_runner_left(sim: Simulator) -> Policy:
    """Breaks §11 M6 (and C6): a turn bound to a runner that left the set is
    sent to another member, as if nothing could have run there."""

    def policy(record: OperationRecord, event: Event, ctx: Context) -> Decision:
        bound = record.state in (OpState.DISPATCH_UNKNOWN, OpState.RUNNING, OpState.CANCELLING)
        others = sorted(name for name in sim.runners if name != record.runner)
        if isinstance(event, NotAMember) and bound and others:
            other = sim.runners[others[0]]
            return write_ahead(
                record,
                ctx,
                runner=other.name,
                incarnation_id=other.incarnation_id,
                store_id=other.store.store_id,
                why="its runner left the set",
            )
        return decide(record, event, ctx)

    return policy


def left_runner_is_not_started(sim: Simulator) -> Policy:
    """Breaks §11 M6 (and C14): a turn whose runner left the set ends NOT_STARTED."""

    def policy(record: OperationRecord, event: Event, ctx: Context) -> Decision:
        decision = decide(record, event, ctx)
        change = decision.change
        if not isinstance(event, NotAMember) or change is None or not change.after.state.terminal:
            return decision
        return _billed_not_started(decision)

    return policy


def stale_is_a_full_runner(sim: Simulator) -> Policy:
    """Breaks C6c's bound: a DISPATCH_STALE refusal is read as a full runner's (never
    counted, never ending the turn), so a runner whose clock runs ahead is sent
    Dispatches for ever and nobody is told why."""

    def policy(record: OperationRecord, event: Event, ctx: Context) -> Decision:
        if isinstance(event, DispatchRefused) and event.reason == "DISPATCH_STALE":
            event = dataclasses.replace(event, reason="NO_FREE_SLOT")
        return decide(record, event, ctx)

    return policy


BROKEN: dict[str, Callable[[Simulator], Policy]] = {
    "resend_when_the_runner_left": resend_when_the_runner_left,
    "left_runner_is_not_started": left_runner_is_not_started,
    "replay_after_changed_incarnation": replay_after_changed_incarnation,
    "timeout_is_refusal": timeout_is_refusal,
    "skip_preflight": skip_preflight,
    "unknown_is_not_started": unknown_is_not_started,
    "dispatch_without_write_ahead": dispatch_without_write_ahead,
}
# stale_is_a_full_runner is not in BROKEN: test_teeth.py pins it to C6c alone.
# trust_the_store_blindly is not in BROKEN: the structural proof check takes a
# same-store_id answer at its word (it cannot see a restore either), so only the
# ledger shows that harm; test_teeth.py runs it with restores made common.
