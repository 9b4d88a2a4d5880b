"""Replay policies and max_attempts (§3), restart (C12), terminal once (C10),
audit rows and events (C13), and illegal edges."""

from __future__ import annotations

import pytest

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.decide import decide
from coordinator_svc.core.decision import transition
from coordinator_svc.core.edges import IllegalTransition
from coordinator_svc.core.events import (
    DispatchRefused,
    ReleaseDone,
    Restarted,
    RunnerReported,
    Tick,
)
from coordinator_svc.core.model import (
    AttemptOutcome,
    Change,
    Execution,
    OperationRecord,
    OpState,
    ReplayPolicy,
)
from coordinator_svc.core.runner_view import RunnerOpState as R
from coordinator_svc.ports import InvalidWrite
from coordinator_svc.storage import rules
from tests.coordinator.core.giving_up import without_tombstone
from tests.coordinator.core.scenario import (
    INC_A,
    INC_B,
    NOW,
    RUNNER,
    STAMP,
    answer,
    attempt,
    bound,
    ctx,
    queued,
    row,
    step,
)


def test_never_automatic_does_not_replay_after_the_first_send() -> None:
    """§3 NEVER_AUTOMATIC: same-incarnation absence after a send ends TIMED_OUT, no Dispatch."""
    before = bound(OpState.DISPATCH_UNKNOWN, replay_policy=ReplayPolicy.NEVER_AUTOMATIC)
    context = ctx(attempt(1))
    record, decision = without_tombstone(before, decide(before, answer(None), context), context)
    assert record.state is OpState.TIMED_OUT and record.execution is Execution.UNKNOWN
    assert decision.commands == ()


def test_never_automatic_still_resolves_by_preflight() -> None:
    """§3 NEVER_AUTOMATIC: ambiguity the preflight resolves is adopted as usual."""
    before = bound(OpState.DISPATCH_UNKNOWN, replay_policy=ReplayPolicy.NEVER_AUTOMATIC)
    record, _ = step(before, answer(row(R.SUCCEEDED, Execution.STARTED)), ctx(attempt(1)))
    assert record.state is OpState.SUCCEEDED


@pytest.mark.rule("C6")
def test_never_automatic_may_send_after_definite_refusals() -> None:
    """§3 NEVER_AUTOMATIC/C6: refused attempts never ran; a fresh first send is allowed."""
    before = queued(
        replay_policy=ReplayPolicy.NEVER_AUTOMATIC, attempt_count=1, last_event_sequence=3
    )
    record, decision = step(before, answer(None), ctx(attempt(1, AttemptOutcome.REFUSED)))
    assert record.state is OpState.DISPATCHING
    assert "replay" not in decision.tags


def test_safe_policy_dispatches_again_to_the_new_incarnation() -> None:
    """§3 SAFE: after changed-incarnation ambiguity it may dispatch to the new one (counted)."""
    before = bound(OpState.DISPATCH_UNKNOWN, replay_policy=ReplayPolicy.SAFE)
    record, decision = step(before, answer(None, incarnation=INC_B), ctx(attempt(1)))
    assert record.state is OpState.DISPATCHING and record.incarnation_id == INC_B
    assert decision.commands == (cmd.Dispatch(RUNNER, 2, INC_B, record.fencing_token, STAMP),)
    assert "replay" in decision.tags


@pytest.mark.rule("C14")
def test_safe_policy_success_after_an_unknown_attempt_is_started() -> None:
    """C14 join: a confirmed start on the new incarnation makes execution STARTED."""
    before = bound(
        OpState.DISPATCH_UNKNOWN, 2, replay_policy=ReplayPolicy.SAFE, incarnation_id=INC_B
    )
    rows = (attempt(1), attempt(2, incarnation=INC_B))
    done = row(R.SUCCEEDED, Execution.STARTED, INC_B)
    record, _ = step(before, answer(done, incarnation=INC_B, asked=2), ctx(*rows))
    assert record.execution is Execution.STARTED


@pytest.mark.parametrize("policy", list(ReplayPolicy))
def test_max_attempts_bounds_every_policy(policy: ReplayPolicy) -> None:
    """§3: a replay that would exceed max_attempts ends TIMED_OUT MAX_ATTEMPTS_EXCEEDED, UNKNOWN."""
    before = bound(OpState.DISPATCH_UNKNOWN, 2, max_attempts=2, replay_policy=policy)
    context = ctx(attempt(1), attempt(2))
    gave_up = decide(before, answer(None, asked=2), context)
    record, decision = without_tombstone(before, gave_up, context)
    assert record.state is OpState.TIMED_OUT
    assert record.error_reason in {"MAX_ATTEMPTS_EXCEEDED"}
    assert record.execution is Execution.UNKNOWN
    assert decision.commands == ()


@pytest.mark.rule("C14")
def test_max_attempts_after_only_refusals_is_not_started() -> None:
    """§3/C14: out of attempts, but every one was refused: NOT_STARTED."""
    before = queued(attempt_count=2, max_attempts=2, last_event_sequence=5)
    rows = (attempt(1, AttemptOutcome.REFUSED), attempt(2, AttemptOutcome.REFUSED))
    record, _ = step(before, answer(None, asked=2), ctx(*rows))
    assert record.error_reason == "MAX_ATTEMPTS_EXCEEDED"
    assert record.execution is Execution.NOT_STARTED


@pytest.mark.rule("C12")
def test_restart_turns_dispatching_into_dispatch_unknown() -> None:
    """C12: on start every DISPATCHING row becomes DISPATCH_UNKNOWN (attempt UNKNOWN)."""
    before = bound(OpState.DISPATCHING)
    record, decision = step(before, Restarted(), ctx(attempt(1, AttemptOutcome.PENDING)))
    assert record.state is OpState.DISPATCH_UNKNOWN and record.unknown_since == NOW
    assert decision.change is not None
    assert decision.change.attempt_updates[0].outcome is AttemptOutcome.UNKNOWN


@pytest.mark.rule("C12")
@pytest.mark.parametrize("state", [s for s in OpState if s is not OpState.DISPATCHING])
def test_restart_leaves_every_other_state_alone(state: OpState) -> None:
    """C12: everything else resumes as it is."""
    assert decide(bound(state), Restarted(), ctx(attempt(1))).change is None


@pytest.mark.rule("C7")
def test_tick_abandoned_dispatch_is_unknown() -> None:
    """C7: a DISPATCHING row whose send never reported back is ambiguous, never retried blind."""
    before = bound(OpState.DISPATCHING, last_attempt_at=NOW.replace(hour=11))
    record, _ = step(before, Tick(), ctx(attempt(1, AttemptOutcome.PENDING)))
    assert record.state is OpState.DISPATCH_UNKNOWN


def succeeded() -> OperationRecord:
    return bound(OpState.SUCCEEDED, execution=Execution.STARTED, result=b"r", released=True)


@pytest.mark.rule("C10")
def test_identical_terminal_report_is_a_no_op() -> None:
    """C10: a repeated identical report changes nothing."""
    done = row(R.SUCCEEDED, Execution.STARTED, result=b"r", released=True)
    decision = decide(succeeded(), RunnerReported(RUNNER, INC_A, done), ctx(attempt(1)))
    assert decision.change is None and decision.commands == ()


@pytest.mark.rule("C10", "R9")
def test_released_row_with_an_emptied_result_is_not_a_conflict() -> None:
    """C10/R9: regression: a released row's emptied result raised TERMINAL_CONFLICT alarms."""
    released = row(R.SUCCEEDED, Execution.STARTED, result=b"", released=True)
    decision = decide(succeeded(), RunnerReported(RUNNER, INC_A, released), ctx(attempt(1)))
    assert decision.change is None and decision.commands == ()


@pytest.mark.rule("C10")
def test_conflicting_terminal_report_is_an_alarm_and_changes_nothing() -> None:
    """C10: a conflicting report is recorded as a protocol alarm; the state stays."""
    failed = row(R.FAILED, Execution.STARTED, released=True)
    decision = decide(succeeded(), RunnerReported(RUNNER, INC_A, failed), ctx(attempt(1)))
    assert decision.change is None
    assert isinstance(decision.commands[0], cmd.Alarm)
    assert "alarm" in decision.tags


@pytest.mark.rule("C10")
def test_unreleased_settled_row_of_a_terminal_operation_is_released() -> None:
    """C10: a Release lost to a crash or the network is re-sent when the row shows up."""
    done = row(R.SUCCEEDED, Execution.STARTED, result=b"r", released=False)
    decision = decide(succeeded(), RunnerReported(RUNNER, INC_A, done), ctx(attempt(1)))
    assert decision.commands == (cmd.Release(RUNNER, INC_A, 1),)


@pytest.mark.rule("C10")
def test_terminal_not_yet_released_is_released_then_recorded() -> None:
    """C10: after the terminal write the runner is told to release; then it is recorded."""
    before = bound(OpState.FAILED, execution=Execution.STARTED, released=False)
    decision = decide(before, Tick(), ctx(attempt(1)))
    assert decision.commands == (cmd.Release(RUNNER, INC_A, 1, record=True),)
    record, _ = step(before, ReleaseDone(), ctx(attempt(1)))
    assert record.released and record.state is OpState.FAILED


@pytest.mark.rule("C10")
@pytest.mark.parametrize("terminal", [s for s in OpState if s.terminal])
def test_terminal_states_have_no_outgoing_edge(terminal: OpState) -> None:
    """C10/§2: an illegal transition raises and changes nothing."""
    before = bound(terminal)
    with pytest.raises(IllegalTransition):
        transition(before, OpState.RUNNING, ctx())
    assert before.state is terminal


def test_illegal_edge_is_refused_by_the_journal_rules() -> None:
    """§2: QUEUED -> CANCELLING is not an edge; a Change claiming it is refused."""
    before = queued()
    bogus = Change(before, before.__class__(**{**before.__dict__, "state": OpState.CANCELLING}))
    with pytest.raises((IllegalTransition, InvalidWrite)):
        rules.prepare_change(bogus)


@pytest.mark.rule("C13")
def test_every_transition_carries_its_event() -> None:
    """C13: a state change appends an event with the next sequence and both states."""
    _record, decision = step(queued(), answer(None, asked=0), ctx())
    assert decision.change is not None and decision.change.event is not None
    event = decision.change.event
    assert (event.from_state, event.to_state, event.sequence) == (
        OpState.QUEUED,
        OpState.DISPATCHING,
        2,
    )


@pytest.mark.rule("C13")
def test_refused_attempt_row_records_the_reason() -> None:
    """C13: the attempt row is closed with its outcome and detail."""
    _record, decision = step(
        bound(OpState.DISPATCHING),
        DispatchRefused(1, "NO_FREE_SLOT", INC_A, "all 4 slots busy"),
        ctx(attempt(1, AttemptOutcome.PENDING)),
    )
    assert decision.change is not None
    (update,) = decision.change.attempt_updates
    assert update.outcome is AttemptOutcome.REFUSED and "NO_FREE_SLOT" in update.detail


@pytest.mark.rule("C10", "C8a")
def test_later_incarnation_holding_an_unreleased_row_is_told_to_release() -> None:
    """C10/§6/C8a: a later incarnation's unreleased row is released, not compared."""
    other = row(R.FAILED, Execution.STARTED, INC_A, released=False)
    decision = decide(succeeded(), RunnerReported(RUNNER, INC_B, other), ctx(attempt(1)))
    assert decision.change is None
    assert decision.commands == (cmd.Release(RUNNER, INC_B, 1),)
