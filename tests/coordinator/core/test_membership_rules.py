"""Runner membership, pure (PROTOCOL.md §11): the set's rules and a turn bound to a
runner that is not a member (M6)."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator_svc.config import RunnerEndpoint, RunnerSpecError, parse_runner_spec
from coordinator_svc.config import runner_endpoint as endpoint_of
from coordinator_svc.core import commands as cmd
from coordinator_svc.core.decide import decide
from coordinator_svc.core.events import NotAMember
from coordinator_svc.core.membership import (
    AddOutcome,
    MemberRefusal,
    MembershipRecord,
    add_outcome,
    added,
    flag_plan,
    members_of,
    membership_change,
    removal_refusal,
    removal_replayed,
    removed,
)
from coordinator_svc.core.model import AttemptOutcome, Execution, OpState, TurnKind
from tests.coordinator.core.scenario import NOW, RUNNER, attempt, bound, ctx, queued, step

R1 = RunnerEndpoint("r1", "127.0.0.1:7001")
MOVED = RunnerEndpoint("r1", "127.0.0.1:7002")


def member(endpoint: RunnerEndpoint = R1, sequence: int = 1) -> MembershipRecord:
    return added(endpoint, "ops", "why", NOW, sequence)


@pytest.mark.rule("M2")
def test_adding_a_new_or_removed_name_stores_the_same_fields_replay_others_conflict() -> None:
    """M2: never seen or removed: store; the live member's fields: replay; other
    fields (address, pool or kinds): RUNNER_CONFLICT."""
    live = member()
    gone = removed(live, "ops", "retired", NOW, forced=False, bound=0)
    assert add_outcome(None, R1) is AddOutcome.STORE
    assert add_outcome(gone, MOVED) is AddOutcome.STORE
    assert add_outcome(live, dataclasses.replace(R1, generation=7)) is AddOutcome.REPLAY
    for other in (
        MOVED,
        dataclasses.replace(R1, pool="gpu"),
        dataclasses.replace(R1, kinds=frozenset({TurnKind.READ_ONLY})),
    ):
        assert add_outcome(live, other) is MemberRefusal.RUNNER_CONFLICT


@pytest.mark.rule("M3", "M4")
def test_removal_needs_a_drain_and_no_bound_turn_unless_forced() -> None:
    """M3/M4: NOT_DRAINED before HAS_TURNS; force skips both; no member or another
    generation is NOT_FOUND; the recorded removal asked again is a replay."""
    live = member()

    def refusal(
        *, generation: int = 0, drained: bool = True, bound: int = 0, force: bool = False
    ) -> MemberRefusal | None:
        return removal_refusal(
            live, generation=generation, drained=drained, bound=bound, force=force
        )

    assert refusal() is None
    assert refusal(drained=False, bound=3) is MemberRefusal.RUNNER_NOT_DRAINED
    assert refusal(bound=3) is MemberRefusal.RUNNER_HAS_TURNS
    assert refusal(drained=False, bound=3, force=True) is None
    assert refusal(generation=2, force=True) is MemberRefusal.RUNNER_NOT_FOUND
    assert removal_refusal(None, generation=0, drained=True, bound=0, force=True) is (
        MemberRefusal.RUNNER_NOT_FOUND
    )
    gone = removed(live, "ops", "retired", NOW, forced=True, bound=3)
    assert gone.sequence == 2 and gone.forced and gone.bound_turns == 3
    assert removal_replayed(gone, 0) and removal_replayed(gone, 1)
    assert not removal_replayed(gone, 3) and not removal_replayed(live, 0)


@pytest.mark.rule("M8")
def test_flags_add_only_names_the_journal_never_saw() -> None:
    """M8: unseen: added; agreeing: nothing; removed: not re-added (reported);
    disagreeing with the live member: a conflict (the start is refused)."""
    r2, r3, r4 = (RunnerEndpoint(f"r{n}", f"127.0.0.1:700{n}") for n in (2, 3, 4))
    latest = (
        member(R1),
        removed(member(r2), "ops", "gone", NOW, forced=False, bound=0),
        member(r3),
    )
    plan = flag_plan((R1, r2, dataclasses.replace(r3, pool="gpu"), r4), latest)
    assert plan.to_add == (r4,)
    assert [flag.name for flag, _ in plan.removed] == ["r2"]
    assert [flag.name for flag, _ in plan.conflicts] == ["r3"]
    assert members_of(latest) == (
        dataclasses.replace(R1, generation=1),
        dataclasses.replace(r3, generation=1),
    )


@pytest.mark.rule("M5", "M7")
def test_a_name_added_again_is_closed_and_built_anew() -> None:
    """M5/M7: members differ by every field, generation included: a new generation
    of a name is one member removed and one added, never carried over."""
    first, again = dataclasses.replace(R1, generation=1), dataclasses.replace(R1, generation=3)
    change = membership_change((first,), (again,))
    assert change.added == (again,) and change.removed == (first,)
    assert not membership_change((first,), (first,))


@pytest.mark.rule("M2")
def test_runner_fields_are_checked_alike_for_flags_and_calls() -> None:
    """M2: a name, a HOST:PORT address (port 1..65535), a pool, at least one kind;
    the error names the field."""
    assert parse_runner_spec("r1=127.0.0.1:7001;pool=gpu;kinds=read_only") == RunnerEndpoint(
        "r1", "127.0.0.1:7001", "gpu", frozenset({TurnKind.READ_ONLY})
    )
    cases: tuple[tuple[tuple[str, ...], str], ...] = (
        (("", "127.0.0.1:1"), "name"),
        (("a b", "127.0.0.1:1"), "name"),
        (("r1", "127.0.0.1"), "address"),
        (("r1", "127.0.0.1:0"), "address"),
        (("r1", "127.0.0.1:70000"), "address"),
        (("r1", ":7001"), "address"),
        (("r1", "127.0.0.1:7001", "po ol"), "pool"),
    )
    for fields, field in cases:
        with pytest.raises(RunnerSpecError) as refused:
            endpoint_of(*fields)
        assert refused.value.field == field
    with pytest.raises(RunnerSpecError):
        endpoint_of("r1", "127.0.0.1:1", "default", frozenset())


def gone(command: str, asked: int = 1, sequence: int | None = None) -> NotAMember:
    return NotAMember(RUNNER, command, asked, sequence)


@pytest.mark.rule("M6", "C6")
@pytest.mark.parametrize("state", [OpState.DISPATCH_UNKNOWN, OpState.RUNNING, OpState.CANCELLING])
def test_a_turn_bound_to_a_runner_that_left_ends_timed_out_never_not_started(
    state: OpState,
) -> None:
    """M6: no answer can come from a runner that is not a member: TIMED_OUT
    RUNNER_REMOVED at once, execution UNKNOWN (a Dispatch may have arrived), and
    nothing sent anywhere (C6)."""
    before = bound(state)
    record, decision = step(before, gone("status"), ctx(attempt(1, AttemptOutcome.ACCEPTED)))
    assert record.state is OpState.TIMED_OUT and record.error_reason == "RUNNER_REMOVED"
    assert record.execution is Execution.UNKNOWN
    assert not [c for c in decision.commands if isinstance(c, (cmd.Dispatch, cmd.Preflight))]


@pytest.mark.rule("M6", "C14")
def test_a_confirmed_start_stays_started_when_its_runner_left() -> None:
    """M6, C14: a start the runner confirmed stays STARTED."""
    before = bound(OpState.RUNNING, execution=Execution.STARTED)
    record, _ = step(before, gone("cancel"), ctx(attempt(1, AttemptOutcome.ACCEPTED)))
    assert (record.state, record.execution) == (OpState.TIMED_OUT, Execution.STARTED)


@pytest.mark.rule("M6", "C6")
def test_a_dispatch_never_sent_sends_the_turn_back_to_route_elsewhere() -> None:
    """M6, C6: written ahead but not sent (its runner left): refused, not counted
    toward max_attempts, QUEUED and unbound, NOT_STARTED."""
    before = bound(OpState.DISPATCHING, max_attempts=1)
    record, _ = step(before, gone("dispatch"), ctx(attempt(1, AttemptOutcome.PENDING)))
    assert record.state is OpState.QUEUED and record.runner is None
    assert record.execution is Execution.NOT_STARTED


@pytest.mark.rule("M6", "C6")
def test_a_dispatch_never_sent_after_an_unresolved_one_stays_bound() -> None:
    """M6, C6: an earlier attempt may have reached it: DISPATCH_UNKNOWN, still bound,
    and the next look ends it (never routed to another runner)."""
    rows = (attempt(1, AttemptOutcome.UNKNOWN), attempt(2, AttemptOutcome.PENDING))
    before = bound(OpState.DISPATCHING, 2)
    record, _ = step(before, gone("dispatch", asked=2), ctx(*rows))
    assert record.state is OpState.DISPATCH_UNKNOWN and record.runner == RUNNER


@pytest.mark.rule("M6", "K6")
def test_a_release_owed_to_a_runner_that_left_is_recorded_released() -> None:
    """M6, K6: a Release that cannot be sent is not owed for ever."""
    before = bound(OpState.SUCCEEDED, released=False, finished_at=NOW)
    record, decision = step(before, gone("release"), ctx())
    assert record.released and record.state is OpState.SUCCEEDED and not decision.commands


@pytest.mark.rule("M6", "C8a")
def test_stale_or_unbound_answers_change_nothing() -> None:
    """M6, C8a: a QUEUED turn (a grant raced the removal), an older attempt's
    command, a status asked before the latest transition: nothing."""
    assert decide(queued(), gone("status", asked=0), ctx()).change is None
    assert decide(bound(OpState.RUNNING, 2), gone("status", asked=1), ctx()).change is None
    running = bound(OpState.RUNNING)
    stale = gone("status", sequence=running.last_event_sequence - 1)
    assert decide(running, stale, ctx()).change is None
    other = NotAMember("r9", "status", 1)
    assert decide(running, other, ctx()).change is None
