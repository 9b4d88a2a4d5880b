"""Conformance cases: submit (C1, §7 idempotency), reads, listings, due work (C12).

Part of ``JournalConformance``; run them through it (see ``turnwire.testing``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta, timezone

import pytest

from coordinator_svc.core.model import Execution, OpState
from coordinator_svc.ports import (
    IdempotencyKeyReused,
    InvalidWrite,
    Journal,
    JournalUnavailable,
    PageCursor,
)
from turnwire.testing.journal_store import JournalCases, JournalStore
from turnwire.testing.records import (
    T0,
    bookkeeping,
    dispatch,
    first_event,
    new_operation,
    submitted,
    transition,
)


class SubmitAndReadCases(JournalCases):
    """Accepting turns and reading them back: the Journal port's read side."""

    def test_submit_stores_operation_and_first_event(self, journal_store: JournalStore) -> None:
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

        journal_store.run(scenario)

    def test_submit_same_key_same_request_is_a_replay(self, journal_store: JournalStore) -> None:
        """§7: a known key with the same request returns the original operation, marked replay."""

        async def scenario(journal: Journal) -> None:
            original = await submitted(journal, 1, key="k", request="r")
            again = new_operation(2, key="k", request="r")
            stored, replay = await journal.submit(again, first_event(again))
            assert replay is True
            assert stored == original
            assert await journal.get(again.operation_id) is None

        journal_store.run(scenario)

    def test_submit_same_key_different_request_is_refused_and_changes_nothing(
        self, journal_store: JournalStore
    ) -> None:
        """§7: a known key with a different request raises IdempotencyKeyReused; nothing changes."""

        async def scenario(journal: Journal) -> None:
            original = await submitted(journal, 1, key="k", request="r")
            commits = journal.commits
            other = new_operation(2, key="k", request="something else")
            with pytest.raises(IdempotencyKeyReused) as refused:
                await journal.submit(other, first_event(other))
            assert refused.value.operation_id == original.operation_id
            assert await journal.get(other.operation_id) is None
            assert await journal.get(original.operation_id) == original
            assert journal.commits == commits

        journal_store.run(scenario)

    def test_same_key_under_two_principals_makes_two_operations(
        self, journal_store: JournalStore
    ) -> None:
        """§1: idempotency keys are unique per principal, not globally."""

        async def scenario(journal: Journal) -> None:
            first = await submitted(journal, 1, principal="alice", key="k")
            second = await submitted(journal, 2, principal="bob", key="k")
            assert first.operation_id != second.operation_id

        journal_store.run(scenario)

    def test_by_idempotency_key_finds_only_the_principals_own(
        self, journal_store: JournalStore
    ) -> None:
        """§1, §7: the key lookup a quota refusal makes sees only the caller's own submit."""

        async def scenario(journal: Journal) -> None:
            alice = await submitted(journal, 1, principal="alice", key="k")
            key = alice.idempotency_key_digest
            assert await journal.by_idempotency_key("alice", key) == alice
            assert await journal.by_idempotency_key("bob", key) is None
            assert await journal.by_idempotency_key("alice", "0" * 64) is None

        journal_store.run(scenario)

    def test_concurrent_submits_with_one_key_make_one_row(
        self, journal_store: JournalStore
    ) -> None:
        """C1/§7: racing submits with one key from two handles store one operation; all see it."""

        async def scenario(journal: Journal) -> None:
            other_handle = await journal_store.open()
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

        journal_store.run(scenario)

    def test_get_for_principal_hides_other_principals(self, journal_store: JournalStore) -> None:
        """§7/§8.8: another principal's operation reads exactly like an unknown id."""

        async def scenario(journal: Journal) -> None:
            stored = await submitted(journal, 1, principal="alice")
            assert await journal.get_for_principal("alice", stored.operation_id) == stored
            assert await journal.get_for_principal("bob", stored.operation_id) is None
            assert await journal.get_for_principal("bob", "op-none") is None
            assert await journal.get("op-none") is None
            assert await journal.list_for_principal("bob", [], 10, None) == []

        journal_store.run(scenario)

    def test_list_filters_by_state_and_pages_by_cursor(self, journal_store: JournalStore) -> None:
        """§7: listing is per principal, ordered by (created_at, id), filtered, resumable."""

        async def scenario(journal: Journal) -> None:
            same_time = T0 + timedelta(minutes=5)
            ops = [await submitted(journal, n, created_at=same_time) for n in (3, 1, 2)]
            ops += [await submitted(journal, n) for n in (4, 5)]
            await submitted(journal, 6, principal="bob")
            cancelled = await journal.commit(transition(ops[0], OpState.CANCELLED))
            page1 = await journal.list_for_principal("alice", [], 2, None)
            assert [r.operation_id for r in page1] == ["op-0004", "op-0005"]
            cursor = PageCursor(page1[-1].created_at, page1[-1].operation_id)
            page2 = await journal.list_for_principal("alice", [], 10, cursor)
            assert [r.operation_id for r in page2] == ["op-0001", "op-0002", "op-0003"]
            only_cancelled = await journal.list_for_principal(
                "alice", [OpState.CANCELLED], 10, None
            )
            assert only_cancelled == [cancelled]
            both = await journal.list_for_principal(
                "alice", [OpState.CANCELLED, OpState.QUEUED], 10, None
            )
            assert len(both) == 5

        journal_store.run(scenario)

    def test_naive_datetimes_are_refused_and_zones_stored_as_utc(
        self, journal_store: JournalStore
    ) -> None:
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

        journal_store.run(scenario)

    def test_due_lists_ready_work_and_unreleased_terminals(
        self, journal_store: JournalStore
    ) -> None:
        """C10/C12: due() gives non-terminal rows whose time has come plus unreleased terminals."""

        async def scenario(journal: Journal) -> None:
            ready = await submitted(journal, 1)
            backing_off = await submitted(journal, 2)
            await journal.commit(bookkeeping(backing_off, next_action_at=T0 + timedelta(hours=1)))
            at_now = await submitted(journal, 3)
            at_now = await journal.commit(bookkeeping(at_now, next_action_at=T0))
            finished = await submitted(journal, 4)
            finished = await journal.commit(transition(finished, OpState.CANCELLED))
            released = await submitted(journal, 5)
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

        journal_store.run(scenario)

    def test_in_state_lists_operations_in_one_state(self, journal_store: JournalStore) -> None:
        """C12: in_state() finds every DISPATCHING row a restart must turn DISPATCH_UNKNOWN."""

        async def scenario(journal: Journal) -> None:
            first = await journal.commit(dispatch(await submitted(journal, 1)))
            await submitted(journal, 2)
            second = await journal.commit(dispatch(await submitted(journal, 3)))
            assert await journal.in_state(OpState.DISPATCHING, 10) == [first, second]
            assert await journal.in_state(OpState.DISPATCHING, 1) == [first]
            assert await journal.in_state(OpState.RUNNING, 10) == []

        journal_store.run(scenario)

    def test_bound_to_lists_one_runners_operations_in_one_state(
        self, journal_store: JournalStore
    ) -> None:
        """C9: bound_to() finds what a watch checks on one runner, and with
        ``other_than`` only what is bound to another incarnation of it."""

        async def scenario(journal: Journal) -> None:
            first = await journal.commit(dispatch(await submitted(journal, 1)))
            await journal.commit(dispatch(await submitted(journal, 2), runner="runner-b"))
            third = await journal.commit(dispatch(await submitted(journal, 3)))
            await submitted(journal, 4)
            state = OpState.DISPATCHING
            assert await journal.bound_to("runner-a", state, 10) == [first, third]
            assert await journal.bound_to("runner-a", state, 1) == [first]
            assert await journal.bound_to("runner-a", OpState.RUNNING, 10) == []
            assert first.incarnation_id is not None
            assert await journal.bound_to("runner-a", state, 10, other_than="inc-new") == [
                first,
                third,
            ]
            # Both are bound to the incarnation dispatch() names: none elsewhere.
            bound_here = first.incarnation_id
            assert await journal.bound_to("runner-a", state, 10, other_than=bound_here) == []

        journal_store.run(scenario)

    def test_closed_journal_refuses_every_call(self, journal_store: JournalStore) -> None:
        """Storage: after close() every call raises JournalUnavailable instead of half-working."""

        async def scenario(journal: Journal) -> None:
            stored = await submitted(journal, 1)
            await journal.close()
            with pytest.raises(JournalUnavailable):
                await journal.get(stored.operation_id)
            with pytest.raises(JournalUnavailable):
                await journal.commit(transition(stored, OpState.CANCELLED))

        journal_store.run(scenario)

    def test_every_state_and_execution_value_can_be_stored(
        self, journal_store: JournalStore
    ) -> None:
        """§2: the schema accepts every state and execution the core defines (no enum drift)."""

        async def scenario(journal: Journal) -> None:
            for number, state in enumerate(OpState, start=1):
                execution = list(Execution)[number % len(Execution)]
                stored = await submitted(journal, number, state=state, execution=execution)
                assert await journal.get(stored.operation_id) == stored

        journal_store.run(scenario)
