"""The Journal contract: every adapter (fake, SQLite, PostgreSQL) passes these."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta, timezone
from typing import Any

import pytest

from coordinator_svc.core.edges import IllegalTransition
from coordinator_svc.core.model import (
    AttemptOutcome,
    AttemptUpdate,
    Execution,
    OperationRecord,
    OpState,
)
from coordinator_svc.ports import (
    IdempotencyKeyReused,
    InvalidWrite,
    Journal,
    JournalUnavailable,
    LeaseLost,
    PageCursor,
    StaleVersion,
)
from tests.coordinator.storage.conftest import Backend
from tests.coordinator.storage.records import (
    T0,
    bookkeeping,
    dispatch,
    first_event,
    new_operation,
    transition,
)


async def _submitted(journal: Journal, number: int = 1, **fields: Any) -> OperationRecord:
    operation = new_operation(number, **fields)
    stored, replay = await journal.submit(operation, first_event(operation))
    assert not replay
    return stored


def test_submit_stores_operation_and_first_event(backend: Backend) -> None:
    """C1: submit persists the operation, its exact envelope bytes and event 1 together."""

    async def scenario(journal: Journal) -> None:
        operation = new_operation(1)
        stored, replay = await journal.submit(operation, first_event(operation))
        assert replay is False
        assert stored == dataclasses.replace(operation, last_event_sequence=1)
        assert await journal.get(operation.operation_id) == stored
        events = await journal.events(operation.operation_id, 0, 10)
        assert [(e.sequence, e.from_state, e.to_state) for e in events] == [
            (1, None, OpState.QUEUED)
        ]
        assert (await journal.get(operation.operation_id)).envelope == operation.envelope  # type: ignore[union-attr]

    backend.run(scenario)


def test_submit_same_key_same_request_is_a_replay(backend: Backend) -> None:
    """§7: a known key with the same request returns the original operation, marked replay."""

    async def scenario(journal: Journal) -> None:
        original = await _submitted(journal, 1, key="k", request="r")
        again = new_operation(2, key="k", request="r")
        stored, replay = await journal.submit(again, first_event(again))
        assert replay is True
        assert stored == original
        assert await journal.get(again.operation_id) is None

    backend.run(scenario)


def test_submit_same_key_different_request_is_refused_and_changes_nothing(
    backend: Backend,
) -> None:
    """§7: a known key with a different request raises IdempotencyKeyReused; nothing changes."""

    async def scenario(journal: Journal) -> None:
        original = await _submitted(journal, 1, key="k", request="r")
        commits = journal.commits
        other = new_operation(2, key="k", request="something else")
        with pytest.raises(IdempotencyKeyReused) as refused:
            await journal.submit(other, first_event(other))
        assert refused.value.operation_id == original.operation_id
        assert await journal.get(other.operation_id) is None
        assert await journal.get(original.operation_id) == original
        assert journal.commits == commits

    backend.run(scenario)


def test_same_key_under_two_principals_makes_two_operations(backend: Backend) -> None:
    """§1: idempotency keys are unique per principal, not globally."""

    async def scenario(journal: Journal) -> None:
        first = await _submitted(journal, 1, principal="alice", key="k")
        second = await _submitted(journal, 2, principal="bob", key="k")
        assert first.operation_id != second.operation_id

    backend.run(scenario)


def test_by_idempotency_key_finds_only_the_principals_own(backend: Backend) -> None:
    """§1, §7: the key lookup a quota refusal makes sees only the caller's own submit."""

    async def scenario(journal: Journal) -> None:
        alice = await _submitted(journal, 1, principal="alice", key="k")
        key = alice.idempotency_key_digest
        assert await journal.by_idempotency_key("alice", key) == alice
        assert await journal.by_idempotency_key("bob", key) is None
        assert await journal.by_idempotency_key("alice", "0" * 64) is None

    backend.run(scenario)


def test_concurrent_submits_with_one_key_make_one_row(backend: Backend) -> None:
    """C1/§7: racing submits with one key from two handles store one operation; all see it."""

    async def scenario(journal: Journal) -> None:
        other_handle = backend.open()
        candidates = [new_operation(n, key="same", request="same") for n in range(1, 9)]
        results = await asyncio.gather(
            *(
                (journal if n % 2 else other_handle).submit(op, first_event(op))
                for n, op in enumerate(candidates)
            )
        )
        winners = {stored.operation_id for stored, _ in results}
        assert len(winners) == 1
        assert sorted(replay for _, replay in results) == [False] + [True] * 7
        listed = await journal.list_for_principal("alice", [], 100, None)
        assert [r.operation_id for r in listed] == list(winners)

    backend.run(scenario)


def test_get_for_principal_hides_other_principals(backend: Backend) -> None:
    """§7/§8.8: another principal's operation reads exactly like an unknown id."""

    async def scenario(journal: Journal) -> None:
        stored = await _submitted(journal, 1, principal="alice")
        assert await journal.get_for_principal("alice", stored.operation_id) == stored
        assert await journal.get_for_principal("bob", stored.operation_id) is None
        assert await journal.get_for_principal("bob", "op-none") is None
        assert await journal.get("op-none") is None
        assert await journal.list_for_principal("bob", [], 10, None) == []

    backend.run(scenario)


def test_list_filters_by_state_and_pages_by_cursor(backend: Backend) -> None:
    """§7: listing is per principal, ordered by (created_at, id), filtered, resumable."""

    async def scenario(journal: Journal) -> None:
        same_time = T0 + timedelta(minutes=5)
        ops = [await _submitted(journal, n, created_at=same_time) for n in (3, 1, 2)]
        ops += [await _submitted(journal, n) for n in (4, 5)]
        await _submitted(journal, 6, principal="bob")
        cancelled = await journal.commit(transition(ops[0], OpState.CANCELLED))
        page1 = await journal.list_for_principal("alice", [], 2, None)
        assert [r.operation_id for r in page1] == ["op-0004", "op-0005"]
        cursor = PageCursor(page1[-1].created_at, page1[-1].operation_id)
        page2 = await journal.list_for_principal("alice", [], 10, cursor)
        assert [r.operation_id for r in page2] == ["op-0001", "op-0002", "op-0003"]
        only_cancelled = await journal.list_for_principal("alice", [OpState.CANCELLED], 10, None)
        assert only_cancelled == [cancelled]
        both = await journal.list_for_principal(
            "alice", [OpState.CANCELLED, OpState.QUEUED], 10, None
        )
        assert len(both) == 5

    backend.run(scenario)


def test_commit_writes_row_with_next_version_and_event_sequence(backend: Backend) -> None:
    """C13: a commit stores `after` with version+1 and appends the next event in order."""

    async def scenario(journal: Journal) -> None:
        stored = await _submitted(journal)
        dispatching = await journal.commit(dispatch(stored))
        assert dispatching.version == stored.version + 1
        assert dispatching.last_event_sequence == 2
        assert dispatching.state == OpState.DISPATCHING
        assert await journal.get(stored.operation_id) == dispatching
        running = await journal.commit(
            transition(dispatching, OpState.RUNNING, execution=Execution.STARTED, acknowledged=True)
        )
        assert running.version == stored.version + 2
        events = await journal.events(stored.operation_id, 0, 10)
        assert [(e.sequence, e.to_state) for e in events] == [
            (1, OpState.QUEUED),
            (2, OpState.DISPATCHING),
            (3, OpState.RUNNING),
        ]
        assert [e.sequence for e in await journal.events(stored.operation_id, 1, 1)] == [2]

    backend.run(scenario)


def test_commit_with_stale_version_raises_and_changes_nothing(backend: Backend) -> None:
    """§5: a version mismatch under the same token is StaleVersion; the row is untouched."""

    async def scenario(journal: Journal) -> None:
        stored = await _submitted(journal)
        newer = await journal.commit(bookkeeping(stored, next_action_at=T0))
        with pytest.raises(StaleVersion):
            await journal.commit(dispatch(stored))
        assert await journal.get(stored.operation_id) == newer
        assert await journal.attempts(stored.operation_id) == []
        assert len(await journal.events(stored.operation_id, 0, 10)) == 1

    backend.run(scenario)


def test_racing_commits_from_one_version_let_exactly_one_win(backend: Backend) -> None:
    """§5: concurrent compare-and-set writes from the same version: one wins, the rest are stale."""

    async def scenario(journal: Journal) -> None:
        other_handle = backend.open()
        stored = await _submitted(journal)
        changes = [dispatch(stored, runner=f"runner-{n}") for n in range(6)]
        results = await asyncio.gather(
            *((journal if n % 2 else other_handle).commit(c) for n, c in enumerate(changes)),
            return_exceptions=True,
        )
        winners = [r for r in results if not isinstance(r, BaseException)]
        assert len(winners) == 1
        assert all(isinstance(r, StaleVersion) for r in results if r not in winners)
        attempts = await journal.attempts(stored.operation_id)
        assert [(a.number, a.runner) for a in attempts] == [(1, winners[0].runner)]

    backend.run(scenario)


def test_commit_after_lease_takeover_raises_lease_lost(leasing_backend: Backend) -> None:
    """§5/§8.7: a replica whose fencing token moved on changes no row (LeaseLost)."""

    async def scenario(journal: Journal) -> None:
        stored = await _submitted(journal)
        mine = await journal.claim(stored.operation_id, "replica-a", T0, 10)
        assert mine is not None
        later = T0 + timedelta(seconds=11)
        theirs = await journal.claim(stored.operation_id, "replica-b", later, 10)
        assert theirs is not None and theirs.fencing_token == mine.fencing_token + 1
        with pytest.raises(LeaseLost):
            await journal.commit(dispatch(mine))
        assert await journal.get(stored.operation_id) == theirs
        assert await journal.attempts(stored.operation_id) == []

    leasing_backend.run(scenario)


def test_illegal_transition_is_refused_and_changes_nothing(backend: Backend) -> None:
    """§2: an edge not in the table raises IllegalTransition; no row, event or attempt changes."""

    async def scenario(journal: Journal) -> None:
        stored = await _submitted(journal)
        commits = journal.commits
        with pytest.raises(IllegalTransition):
            await journal.commit(transition(stored, OpState.CANCELLING))
        with pytest.raises(IllegalTransition):
            await journal.commit(transition(stored, OpState.DISPATCH_UNKNOWN))
        assert await journal.get(stored.operation_id) == stored
        assert len(await journal.events(stored.operation_id, 0, 10)) == 1
        assert journal.commits == commits

    backend.run(scenario)


def test_terminal_state_never_changes(backend: Backend) -> None:
    """C10/§8.6: a terminal row refuses any new state and any new outcome; release still records."""

    async def scenario(journal: Journal) -> None:
        stored = await _submitted(journal)
        done = await journal.commit(
            transition(stored, OpState.CANCELLED, finished_at=T0, stop_reason=None)
        )
        for target in OpState:
            with pytest.raises((IllegalTransition, InvalidWrite)):
                await journal.commit(transition(done, target))
        with pytest.raises(InvalidWrite):
            await journal.commit(bookkeeping(done, execution=Execution.UNKNOWN))
        assert await journal.get(stored.operation_id) == done
        released = await journal.commit(bookkeeping(done, released=True))
        assert released.state == OpState.CANCELLED and released.released

    backend.run(scenario)


def test_state_change_without_event_is_refused(backend: Backend) -> None:
    """C13: every transition carries its event; a state change without one writes nothing."""

    async def scenario(journal: Journal) -> None:
        stored = await _submitted(journal)
        with pytest.raises(InvalidWrite):
            await journal.commit(bookkeeping(stored, state=OpState.CANCELLED))
        mismatched = transition(stored, OpState.CANCELLED)
        wrong_event = dataclasses.replace(mismatched.event, to_state=OpState.FAILED)  # type: ignore[type-var]
        with pytest.raises(InvalidWrite):
            await journal.commit(dataclasses.replace(mismatched, event=wrong_event))
        assert await journal.get(stored.operation_id) == stored

    backend.run(scenario)


def test_fields_fixed_at_acceptance_never_change(backend: Backend) -> None:
    """C1: the envelope, digests and fencing token (outside claim) cannot be rewritten."""

    async def scenario(journal: Journal) -> None:
        stored = await _submitted(journal)
        for field_values in (
            {"envelope": b"rebuilt"},
            {"envelope_digest": "0" * 64},
            {"principal": "mallory"},
            {"fencing_token": stored.fencing_token + 1},
        ):
            with pytest.raises(InvalidWrite):
                await journal.commit(bookkeeping(stored, **field_values))
        assert await journal.get(stored.operation_id) == stored

    backend.run(scenario)


def test_naive_datetimes_are_refused_and_zones_stored_as_utc(backend: Backend) -> None:
    """Storage: a naive time is refused; an aware one comes back as the same instant in UTC."""

    async def scenario(journal: Journal) -> None:
        naive = new_operation(1, created_at=T0.replace(tzinfo=None))
        with pytest.raises(InvalidWrite):
            await journal.submit(naive, first_event(naive))
        assert await journal.get(naive.operation_id) is None
        plus_two = timezone(timedelta(hours=2))
        local = new_operation(2, created_at=T0.astimezone(plus_two))
        stored, _ = await journal.submit(local, first_event(local))
        reread = await journal.get(local.operation_id)
        assert reread == stored
        assert reread is not None and reread.created_at == T0 + timedelta(seconds=0)
        assert reread.created_at.utcoffset() == timedelta(0)

    backend.run(scenario)


def test_attempt_written_ahead_then_closed(backend: Backend) -> None:
    """C4/C13: the attempt row commits with DISPATCHING and is closed with its outcome later."""

    async def scenario(journal: Journal) -> None:
        stored = await _submitted(journal)
        dispatching = await journal.commit(dispatch(stored))
        (pending,) = await journal.attempts(stored.operation_id)
        assert (pending.number, pending.outcome) == (1, AttemptOutcome.PENDING)
        assert dispatching.attempt_count == 1
        assert dispatching.last_attempt_at == pending.sent_at
        requeued = await journal.commit(
            transition(
                dispatching,
                OpState.QUEUED,
                attempt_updates=(AttemptUpdate(1, AttemptOutcome.REFUSED, "NO_FREE_SLOT"),),
            )
        )
        again = await journal.commit(dispatch(requeued, runner="runner-b"))
        attempts = await journal.attempts(stored.operation_id)
        assert [(a.number, a.runner, a.outcome, a.detail) for a in attempts] == [
            (1, "runner-a", AttemptOutcome.REFUSED, "NO_FREE_SLOT"),
            (2, "runner-b", AttemptOutcome.PENDING, ""),
        ]
        assert again.attempt_count == 2

    backend.run(scenario)


def test_attempt_numbers_must_follow_attempt_count(backend: Backend) -> None:
    """C13: a new attempt must be number attempt_count+1; updating a missing one is refused."""

    async def scenario(journal: Journal) -> None:
        stored = await _submitted(journal)
        good = dispatch(stored)
        skipped = dataclasses.replace(
            good,
            new_attempt=dataclasses.replace(good.new_attempt, number=2),  # type: ignore[type-var]
            after=dataclasses.replace(good.after, attempt_count=2),
        )
        with pytest.raises(InvalidWrite):
            await journal.commit(skipped)
        uncounted = dataclasses.replace(
            good, after=dataclasses.replace(good.after, attempt_count=0)
        )
        with pytest.raises(InvalidWrite):
            await journal.commit(uncounted)
        with pytest.raises(InvalidWrite):
            await journal.commit(
                transition(
                    stored,
                    OpState.CANCELLED,
                    attempt_updates=(AttemptUpdate(1, AttemptOutcome.REFUSED),),
                )
            )
        assert await journal.get(stored.operation_id) == stored
        assert await journal.attempts(stored.operation_id) == []

    backend.run(scenario)


def test_due_lists_ready_work_and_unreleased_terminals(backend: Backend) -> None:
    """C10/C12: due() gives non-terminal rows whose time has come plus unreleased terminals."""

    async def scenario(journal: Journal) -> None:
        ready = await _submitted(journal, 1)
        backing_off = await _submitted(journal, 2)
        await journal.commit(bookkeeping(backing_off, next_action_at=T0 + timedelta(hours=1)))
        at_now = await _submitted(journal, 3)
        at_now = await journal.commit(bookkeeping(at_now, next_action_at=T0))
        finished = await _submitted(journal, 4)
        finished = await journal.commit(transition(finished, OpState.CANCELLED))
        released = await _submitted(journal, 5)
        released = await journal.commit(transition(released, OpState.CANCELLED, released=True))
        due = await journal.due(T0, 10)
        assert [r.operation_id for r in due] == ["op-0001", "op-0003", "op-0004"]
        assert [r.operation_id for r in await journal.due(T0, 1)] == [ready.operation_id]
        later = await journal.due(T0 + timedelta(hours=2), 10)
        assert "op-0002" in [r.operation_id for r in later]
        # Issue 9: the scheduler holds QUEUED turns in memory; its scan for the
        # rest must not be crowded out by a backlog of them.
        running = await journal.commit(dispatch(at_now))
        not_queued = await journal.due(T0 + timedelta(hours=2), 10, queued=False)
        assert [r.operation_id for r in not_queued] == [running.operation_id, "op-0004"]

    backend.run(scenario)


def test_in_state_lists_operations_in_one_state(backend: Backend) -> None:
    """C12: in_state() finds every DISPATCHING row a restart must turn DISPATCH_UNKNOWN."""

    async def scenario(journal: Journal) -> None:
        first = await journal.commit(dispatch(await _submitted(journal, 1)))
        await _submitted(journal, 2)
        second = await journal.commit(dispatch(await _submitted(journal, 3)))
        assert await journal.in_state(OpState.DISPATCHING, 10) == [first, second]
        assert await journal.in_state(OpState.DISPATCHING, 1) == [first]
        assert await journal.in_state(OpState.RUNNING, 10) == []

    backend.run(scenario)


def test_claim_takes_renews_refuses_and_fences_on_takeover(leasing_backend: Backend) -> None:
    """§5: claim takes a free/expired/own lease, refuses a live one, bumps the token on takeover."""

    async def scenario(journal: Journal) -> None:
        stored = await _submitted(journal)
        op_id = stored.operation_id
        first = await journal.claim(op_id, "a", T0, 10)
        assert first is not None
        assert (first.lease_owner, first.lease_expires_at) == ("a", T0 + timedelta(seconds=10))
        assert first.fencing_token == stored.fencing_token
        assert first.version == stored.version + 1
        assert await journal.claim(op_id, "b", T0 + timedelta(seconds=5), 10) is None
        renewed = await journal.claim(op_id, "a", T0 + timedelta(seconds=5), 10)
        assert renewed is not None and renewed.fencing_token == stored.fencing_token
        taken = await journal.claim(op_id, "b", T0 + timedelta(seconds=16), 10)
        assert taken is not None and taken.lease_owner == "b"
        assert taken.fencing_token == stored.fencing_token + 1
        assert await journal.get(op_id) == taken
        assert await journal.claim("op-none", "a", T0, 10) is None

    leasing_backend.run(scenario)


def test_racing_claims_from_two_replicas_give_one_lease(leasing_backend: Backend) -> None:
    """§5: two replicas claiming one operation at once: exactly one holds the lease."""

    async def scenario(journal: Journal) -> None:
        other_handle = leasing_backend.open()
        stored = await _submitted(journal)
        results = await asyncio.gather(
            *(
                (journal if n % 2 else other_handle).claim(stored.operation_id, f"r{n}", T0, 30)
                for n in range(6)
            )
        )
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        assert await journal.get(stored.operation_id) == winners[0]

    leasing_backend.run(scenario)


def test_commits_counts_committed_write_transactions(leasing_backend: Backend) -> None:
    """bench: commits counts submit, commit and claim writes, not reads, replays or refusals."""

    async def scenario(journal: Journal) -> None:
        start = journal.commits
        stored = await _submitted(journal, 1, key="k", request="r")
        replay = new_operation(2, key="k", request="r")
        await journal.submit(replay, first_event(replay))
        await journal.get(stored.operation_id)
        dispatching = await journal.commit(dispatch(stored))
        with pytest.raises(StaleVersion):
            await journal.commit(dispatch(stored))
        claimed = await journal.claim(stored.operation_id, "a", T0, 10)
        assert claimed is not None and dispatching.version + 1 == claimed.version
        assert await journal.claim(stored.operation_id, "b", T0, 10) is None
        assert journal.commits - start == 3

    leasing_backend.run(scenario)


def test_writes_for_unknown_or_duplicate_ids_are_refused(backend: Backend) -> None:
    """C1: a commit for an id never submitted, or a new operation reusing an id, writes nothing."""

    async def scenario(journal: Journal) -> None:
        stored = await _submitted(journal, 1)
        ghost = new_operation(2)
        with pytest.raises(InvalidWrite):
            await journal.commit(dispatch(ghost))
        assert await journal.get(ghost.operation_id) is None
        same_id = new_operation(1, key="another key", request="another request")
        with pytest.raises(InvalidWrite):
            await journal.submit(same_id, first_event(same_id))
        assert await journal.get(stored.operation_id) == stored
        assert await journal.attempts(ghost.operation_id) == []

    backend.run(scenario)


def test_closed_journal_refuses_every_call(backend: Backend) -> None:
    """Storage: after close() every call raises JournalUnavailable instead of half-working."""

    async def scenario(journal: Journal) -> None:
        stored = await _submitted(journal, 1)
        await journal.close()
        with pytest.raises(JournalUnavailable):
            await journal.get(stored.operation_id)
        with pytest.raises(JournalUnavailable):
            await journal.commit(transition(stored, OpState.CANCELLED))

    backend.run(scenario)


def test_every_state_and_execution_value_can_be_stored(backend: Backend) -> None:
    """§2: the schema accepts every state and execution the core defines (no enum drift)."""

    async def scenario(journal: Journal) -> None:
        for number, state in enumerate(OpState, start=1):
            execution = list(Execution)[number % len(Execution)]
            stored = await _submitted(journal, number, state=state, execution=execution)
            assert await journal.get(stored.operation_id) == stored

    backend.run(scenario)
