"""The driver's step (coordinator_svc.driver.step): the effects it asks for, in
order, and how it ends, for each outcome the shell can send back. The journal
here is the real write rules (``storage.rules``) over a dict, performed by a
ten-line loop: the same generator the engine and the simulation perform."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from coordinator_svc.core.decision import Context
from coordinator_svc.core.edges import IllegalTransition
from coordinator_svc.core.events import CancelRequested, Event, RunnerIdentity, Tick
from coordinator_svc.core.model import AttemptRecord, OperationRecord, OpState
from coordinator_svc.driver.step import (
    MAX_CAS_RETRIES,
    Adopted,
    Claim,
    Commit,
    HoldForGrant,
    Load,
    LoadAttempts,
    NoStep,
    Refused,
    Replica,
    StepEnd,
    Stepped,
    step,
)
from coordinator_svc.storage import rules
from tests.coordinator.core.scenario import INC_A, NOW, RUNNER, STORE, bound, queued

ME = "c1#aaaa"
OTHER = "c2#bbbb"


def context_for(attempts: tuple[AttemptRecord, ...], record: OperationRecord) -> Context:
    return Context(now=NOW, attempts=attempts, replica_id=ME)


def run(
    record: OperationRecord | None,
    event: Event,
    answers: dict[type, list[Any]] | None = None,
    **options: Any,
) -> tuple[StepEnd, list[object]]:
    """Perform a step against one record: loads read it, commits apply the real
    write rules to it; ``answers`` overrides the outcome of an effect kind, in
    order. Returns how the step ended and every effect it asked for."""
    answers = {kind: list(outcomes) for kind, outcomes in (answers or {}).items()}
    current = record
    effects: list[object] = []
    machine = step("op_1", event, context_for, **options)
    outcome: object = None
    try:
        effect = next(machine)
        for _ in range(100):
            effects.append(effect)
            queued_answers = answers.get(type(effect))
            if queued_answers:
                outcome = queued_answers.pop(0)
            elif isinstance(effect, Load):
                outcome = current
            elif isinstance(effect, LoadAttempts):
                outcome = ()
            elif isinstance(effect, Commit):
                current, _, _ = rules.prepare_change(effect.change)
                outcome = current
            elif isinstance(effect, Claim):
                assert current is not None
                current = rules.claimed(current, ME, NOW, 15.0)
                outcome = current
            elif isinstance(effect, HoldForGrant):
                outcome = "no free slot"
            else:
                outcome = None
            if isinstance(outcome, OperationRecord) and not isinstance(effect, Commit):
                current = outcome
            effect = machine.send(outcome)
    except StopIteration as done:
        return done.value, effects
    raise AssertionError("the step did not end")


def kinds(effects: list[object]) -> list[str]:
    return [type(e).__name__ for e in effects]


def leased(record: OperationRecord, owner: str, *, lapsed: bool = False) -> OperationRecord:
    until = NOW - timedelta(seconds=1) if lapsed else NOW + timedelta(seconds=10)
    return dataclasses.replace(record, lease_owner=owner, lease_expires_at=until, fencing_token=3)


ROUTED = Tick(route=RUNNER, route_identity=RunnerIdentity(INC_A, STORE))


@pytest.mark.rule("C4")
def test_a_decision_with_a_change_is_returned_only_as_committed() -> None:
    """C4: the step asks for the commit and returns the stored record with the
    decision, so the shell performs its commands only after the write."""
    end, effects = run(queued(), ROUTED)
    assert kinds(effects) == ["Load", "Commit"]
    assert isinstance(end, Stepped) and end.committed
    assert end.record.state is OpState.DISPATCHING
    assert end.decision.commands


@pytest.mark.rule("C13")
def test_a_stale_version_reads_and_decides_again() -> None:
    """C13: a commit refused as stale is followed by a fresh read and a new decision."""
    end, effects = run(queued(), ROUTED, {Commit: [Refused.STALE]})
    assert kinds(effects) == ["Load", "Commit", "Load", "Commit"]
    assert isinstance(end, Stepped) and end.committed


@pytest.mark.rule("C13")
def test_stale_versions_without_end_give_up_bounded() -> None:
    """C13: A commit refused stale every time ends the step after MAX_CAS_RETRIES reads."""
    end, effects = run(queued(), ROUTED, {Commit: [Refused.STALE] * MAX_CAS_RETRIES})
    assert end is NoStep.GAVE_UP
    assert kinds(effects).count("Load") == MAX_CAS_RETRIES


@pytest.mark.rule("O4")
def test_a_lost_lease_ends_the_step_and_returns_no_decision() -> None:
    """§5 (O4): a commit refused because the lease is another's sends nothing more."""
    record = leased(queued(), ME)
    end, _ = run(record, ROUTED, {Commit: [Refused.LEASE_LOST]}, replica=Replica(ME))
    assert end is NoStep.LEASE_LOST


@pytest.mark.rule("O4")
def test_a_replica_whose_leases_are_not_current_reads_nothing() -> None:
    """O4: a replica past its lease's safe window neither reads nor writes."""
    end, effects = run(leased(queued(), ME), ROUTED, replica=Replica(ME, current=False))
    assert end is NoStep.LEASES_NOT_CURRENT
    assert effects == []


@pytest.mark.rule("O1")
def test_another_replicas_live_lease_is_not_ours_to_step() -> None:
    """O1/O2: an operation under another process's live lease is read, never written."""
    end, effects = run(leased(queued(), OTHER), ROUTED, replica=Replica(ME))
    assert end is NoStep.NOT_OURS
    assert kinds(effects) == ["Load"]


@pytest.mark.rule("O5")
def test_a_cancel_for_another_replicas_operation_is_stored_as_a_mark_only() -> None:
    """O5: a client's cancel on a replica that does not own the operation writes
    the request (a mark, never the lease) and returns no command to send."""
    record = leased(bound(OpState.RUNNING), OTHER)
    end, effects = run(record, CancelRequested(), replica=Replica(ME))
    commit = next(e for e in effects if isinstance(e, Commit))
    assert commit.mark and commit.change.after.lease_owner == OTHER
    assert commit.change.after.cancel_requested
    assert isinstance(end, Stepped) and end.mark and not end.decision.commands


@pytest.mark.rule("O5")
def test_a_refused_cancel_mark_is_judged_again_from_a_fresh_read() -> None:
    """O5: a mark refused (the row moved on, or was adopted) reads and judges again."""
    record = leased(bound(OpState.RUNNING), OTHER)
    end, effects = run(
        record, CancelRequested(), {Commit: [Refused.LEASE_LOST]}, replica=Replica(ME)
    )
    assert kinds(effects) == ["Load", "Commit", "Load", "Commit"]
    assert isinstance(end, Stepped) and end.mark


@pytest.mark.rule("O3")
def test_an_orphan_is_claimed_then_restarted_before_the_event_is_decided() -> None:
    """O3 + C12: an adopter claims the lapsed lease, commits DISPATCHING ->
    DISPATCH_UNKNOWN (never sends it blindly again), tells the scheduler, and
    only then decides the event."""
    record = leased(bound(OpState.DISPATCHING), OTHER, lapsed=True)
    end, effects = run(record, Tick(), replica=Replica(ME))
    assert kinds(effects)[:5] == ["Load", "Claim", "LoadAttempts", "Commit", "Adopted"]
    adoption = effects[3]
    assert isinstance(adoption, Commit) and adoption.adopting
    assert adoption.change.after.state is OpState.DISPATCH_UNKNOWN
    assert isinstance(effects[4], Adopted)
    assert isinstance(end, Stepped) and end.record.lease_owner == ME


@pytest.mark.rule("O3")
def test_an_orphan_another_replica_claimed_first_is_not_ours() -> None:
    """O3: a claim that finds the orphan taken ends the step with nothing written."""
    record = leased(bound(OpState.DISPATCHING), OTHER, lapsed=True)
    end, effects = run(record, Tick(), {Claim: [None]}, replica=Replica(ME))
    assert end is NoStep.NOT_OURS
    assert "Commit" not in kinds(effects)


@pytest.mark.rule("C6")
def test_only_a_grant_routes_a_queued_turn() -> None:
    """C6: a Tick without a route holds a QUEUED turn for the scheduler and is
    decided as a wait; a grant's tick (or one a grant is routing) is not held."""
    end, effects = run(queued(), Tick(), routes_by_grant=True)
    assert kinds(effects) == ["Load", "HoldForGrant"]
    assert isinstance(end, Stepped) and end.decision.change is None
    _, effects = run(queued(), Tick(), routes_by_grant=True, routing=lambda op: True)
    assert "HoldForGrant" not in kinds(effects)
    granted, effects = run(queued(), ROUTED, routes_by_grant=True)
    assert "HoldForGrant" not in kinds(effects)
    assert isinstance(granted, Stepped) and granted.committed


def test_an_illegal_event_changes_nothing_and_says_so() -> None:
    """An event the core refuses (IllegalTransition) ends the step unwritten, marked illegal."""
    terminal = bound(OpState.SUCCEEDED, finished_at=NOW, released=True)

    def illegal(record: OperationRecord, event: Event, ctx: Context) -> Any:
        raise IllegalTransition(record.operation_id, OpState.SUCCEEDED, OpState.RUNNING)

    end, effects = run(terminal, Tick(), policy=illegal)
    assert isinstance(end, Stepped) and end.illegal and end.decision.change is None
    assert "Commit" not in kinds(effects)


def test_an_unknown_operation_ends_the_step() -> None:
    """A record the journal does not have ends the step with nothing decided."""
    end, _ = run(None, Tick())
    assert end is NoStep.UNKNOWN
