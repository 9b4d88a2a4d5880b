"""Execution truth (C14), routing (C6), and properties of every decision."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core import commands as cmd
from coordinator_svc.core.decide import decide
from coordinator_svc.core.events import (
    CancelAnswered,
    CancelRequested,
    DispatchAccepted,
    DispatchRefused,
    DispatchUnknown,
    Event,
    PreflightAnswer,
    PreflightFailed,
    Restarted,
    RunnerReported,
    Tick,
)
from coordinator_svc.core.model import (
    AttemptOutcome,
    Execution,
    OpState,
    ReplayPolicy,
    TurnKind,
)
from coordinator_svc.core.routing import route, runner_for
from coordinator_svc.core.runner_view import RunnerOpState, observe
from coordinator_svc.core.truth import Evidence, joined_execution
from coordinator_svc.core.witness import StoreOpen, store_vouches
from coordinator_svc.storage import rules
from tests.coordinator.core.scenario import (
    INC_A,
    INC_B,
    NOW,
    RUNNER,
    STORE,
    answer,
    attempt,
    attempts_after,
    bound,
    ctx,
    queued,
    row,
)
from turnwire.ids import dispatch_stamp

# --- C14 ---


@pytest.mark.rule("C14")
def test_no_attempt_is_not_started() -> None:
    """C14: no attempt was ever sent: NOT_STARTED."""
    assert joined_execution(queued(), (), None) is Execution.NOT_STARTED


@pytest.mark.rule("C14")
def test_all_refused_is_not_started() -> None:
    """C14: every attempt definitely refused: NOT_STARTED."""
    rows = (attempt(1, AttemptOutcome.REFUSED), attempt(2, AttemptOutcome.REFUSED))
    assert joined_execution(queued(), rows, None) is Execution.NOT_STARTED


@pytest.mark.rule("C14")
def test_absence_never_proves_not_started() -> None:
    """C14: an unresolved attempt without a covering row stays UNKNOWN."""
    assert joined_execution(queued(), (attempt(1),), None) is Execution.UNKNOWN


@pytest.mark.rule("C14")
def test_tombstone_covers_only_its_own_incarnation() -> None:
    """C14 join: a tombstone on B does not speak for an attempt sent to A."""
    rows = (attempt(1, incarnation=INC_A, store=None), attempt(2, incarnation=INC_B, store=None))
    tombstone = Evidence(Execution.NOT_STARTED, INC_B)
    assert joined_execution(queued(), rows, tombstone) is Execution.UNKNOWN
    only_b = (rows[1],)
    assert joined_execution(queued(), only_b, tombstone) is Execution.NOT_STARTED


@pytest.mark.rule("C14")
def test_durable_store_evidence_covers_earlier_incarnations() -> None:
    """§6/C14: a settled row in the same durable store speaks for earlier incarnations."""
    rows = (attempt(1, incarnation=INC_A, store=STORE),)
    settled = Evidence(Execution.NOT_STARTED, INC_B, STORE)
    assert joined_execution(queued(), rows, settled) is Execution.NOT_STARTED


@pytest.mark.rule("C14")
def test_confirmed_start_dominates() -> None:
    """C14: any confirmed start makes the operation STARTED."""
    rows = (attempt(1), attempt(2, incarnation=INC_B))
    assert joined_execution(queued(), rows, Evidence(Execution.STARTED, INC_B)) is Execution.STARTED


@pytest.mark.rule("C14")
def test_unsettled_row_never_says_not_started() -> None:
    """C14: an accepted, unsettled row is not proof: a launch may still come."""
    assert observe(row(RunnerOpState.ACCEPTED, Execution.NOT_STARTED)).execution is (
        Execution.UNKNOWN
    )


@pytest.mark.rule("C14")
def test_never_launched_cancelled_row_is_not_started() -> None:
    """C14: a never-launched row settled as cancelled can no longer change: NOT_STARTED."""
    assert observe(row(RunnerOpState.CANCELLED, Execution.NOT_STARTED)).execution is (
        Execution.NOT_STARTED
    )


# --- routing ---

RUNNERS = (
    RunnerEndpoint("a", "127.0.0.1:1"),
    RunnerEndpoint("b", "127.0.0.1:2"),
    RunnerEndpoint("ro", "127.0.0.1:3", kinds=frozenset({TurnKind.READ_ONLY})),
    RunnerEndpoint("gpu", "127.0.0.1:4", pool="gpu"),
)


@pytest.mark.rule("C6")
def test_route_picks_the_least_loaded_runner_of_the_pool_and_kind() -> None:
    """C6: only QUEUED chooses; it takes the least-loaded runner serving pool and kind."""
    chosen = route("default", TurnKind.WRITABLE, RUNNERS, {"a": 3, "b": 1})
    assert chosen is not None and chosen.name == "b"
    assert route("gpu", TurnKind.READ_ONLY, RUNNERS, {}) == RUNNERS[3]
    assert route("nowhere", TurnKind.WRITABLE, RUNNERS, {}) is None


@pytest.mark.rule("C6")
def test_bound_operation_is_never_moved() -> None:
    """C6: once an attempt may have reached a runner, the operation stays with it."""
    for state in (OpState.DISPATCH_UNKNOWN, OpState.RUNNING, OpState.CANCELLING):
        assert runner_for(bound(state), RUNNERS, {RUNNER: 100}) == RUNNER
    assert runner_for(queued(), RUNNERS, {"a": 0, "b": 5}) == "a"


# --- properties over every decision ---

_STATES = list(OpState)
# The stamp of every attempt the scenario helpers make (sent 5 s before NOW).
STAMP_5S_AGO = dispatch_stamp(NOW - timedelta(seconds=5))
_ROWS = st.builds(
    row,
    st.sampled_from(list(RunnerOpState)),
    st.sampled_from([None, *Execution]),
    st.sampled_from([INC_A, INC_B]),
)
_EVENTS: st.SearchStrategy[Event] = st.one_of(
    st.builds(Tick, st.sampled_from([None, RUNNER])),
    st.just(Restarted()),
    st.just(CancelRequested()),
    st.builds(
        lambda op, inc, durable, asked, opens: answer(
            op, incarnation=inc, durable=durable, asked=asked, opens=opens
        ),
        st.none() | _ROWS,
        st.sampled_from([INC_A, INC_B]),
        st.booleans(),
        st.integers(0, 2),
        # §6 witness: a chain that vouches for INC_A, one that shows INC_A's
        # floor at the attempts' stamp (a restored store), or no chain at all.
        st.sampled_from([None, (StoreOpen(INC_B, INC_A, STAMP_5S_AGO),), ()]),
    ),
    st.builds(PreflightFailed, st.just(RUNNER), st.just("down"), st.integers(0, 2)),
    st.builds(DispatchAccepted, st.integers(1, 2), st.sampled_from([INC_A, INC_B]), _ROWS),
    st.builds(
        DispatchRefused,
        st.integers(1, 2),
        st.sampled_from(["NO_FREE_SLOT", "INCARNATION_MISMATCH", "ENVELOPE_INVALID", "X"]),
    ),
    st.builds(DispatchUnknown, st.integers(1, 2), st.just("timeout")),
    st.builds(RunnerReported, st.just(RUNNER), st.sampled_from([INC_A, INC_B]), _ROWS),
    st.builds(
        CancelAnswered, st.just(RUNNER), st.sampled_from([INC_A, INC_B]), _ROWS, st.booleans()
    ),
)


@pytest.mark.rule("C4", "C10", "C14")
@settings(max_examples=400, deadline=None)
@given(
    state=st.sampled_from(_STATES),
    attempts=st.integers(1, 2),
    policy=st.sampled_from(list(ReplayPolicy)),
    outcomes=st.lists(st.sampled_from(list(AttemptOutcome)), min_size=2, max_size=2),
    event=_EVENTS,
)
def test_every_decision_is_legal_and_never_lies(
    state: OpState,
    attempts: int,
    policy: ReplayPolicy,
    outcomes: list[AttemptOutcome],
    event: Event,
) -> None:
    """§2/C4/C10/C14: every decision is journal-legal and never claims NOT_STARTED from silence."""
    record = bound(state, attempts, replay_policy=policy)
    rows = tuple(attempt(n, outcomes[n - 1]) for n in range(1, attempts + 1))
    # C6: only an operation whose every attempt was definitely refused is QUEUED.
    assume(state is not OpState.QUEUED or all(a.outcome is AttemptOutcome.REFUSED for a in rows))
    decision = decide(record, event, ctx(*rows))
    dispatches = [c for c in decision.commands if isinstance(c, cmd.Dispatch)]
    if decision.change is None:
        assert not dispatches
        return
    stored, _event, new_attempt = rules.prepare_change(decision.change)
    if state.terminal:
        assert stored.state is state
    if dispatches:
        assert new_attempt is not None and dispatches[0].attempt == new_attempt.number
        assert stored.state is OpState.DISPATCHING
        if any(o is not AttemptOutcome.REFUSED for o in outcomes[:attempts]):
            # §8 invariant 4: a replay needs a proof from the bound incarnation, the
            # same durable store, or the SAFE policy.
            assert isinstance(event, PreflightAnswer)
            vouched = store_vouches(
                rows,
                incarnation_id=event.incarnation_id,
                store_id=event.store_id,
                openings=event.store_opens,
            )
            assert (
                event.incarnation_id == record.incarnation_id
                or (event.durable and event.store_id == record.store_id and vouched)
                or policy is ReplayPolicy.SAFE
            )
            assert policy is not ReplayPolicy.NEVER_AUTOMATIC
    evidence_free = isinstance(
        event, PreflightFailed | DispatchUnknown | Tick | Restarted | CancelRequested
    ) or (isinstance(event, PreflightAnswer) and not event.present)
    if evidence_free and stored.execution is Execution.NOT_STARTED:
        # Absence and silence never prove NOT_STARTED: only all-refused does.
        final_rows = attempts_after(rows, decision)
        assert all(a.outcome is AttemptOutcome.REFUSED for a in final_rows)
