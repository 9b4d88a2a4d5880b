"""Conformance cases: commit, the compare-and-set write (§2, C4, C10, C13, §5).

Part of ``JournalConformance``; run them through it (see ``turnwire.testing``).
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from coordinator_svc.core.edges import IllegalTransition
from coordinator_svc.core.model import AttemptOutcome, AttemptUpdate, Execution, OpState
from coordinator_svc.ports import InvalidWrite, Journal, StaleVersion
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


class CommitCases(JournalCases):
    """Changing an operation: one atomic compare-and-set per Change, or nothing."""

    def test_commit_writes_row_with_next_version_and_event_sequence(
        self, journal_store: JournalStore
    ) -> None:
        """C13: a commit stores `after` with version+1 and appends the next event in order."""

        async def scenario(journal: Journal) -> None:
            stored = await submitted(journal)
            dispatching = await journal.commit(dispatch(stored))
            assert dispatching.version == stored.version + 1
            assert dispatching.last_event_sequence == 2
            assert dispatching.state == OpState.DISPATCHING
            assert await journal.get(stored.operation_id) == dispatching
            running = await journal.commit(
                transition(
                    dispatching, OpState.RUNNING, execution=Execution.STARTED, acknowledged=True
                )
            )
            assert running.version == stored.version + 2
            events = await journal.events(stored.operation_id, 0, 10)
            assert [(e.sequence, e.to_state) for e in events] == [
                (1, OpState.QUEUED),
                (2, OpState.DISPATCHING),
                (3, OpState.RUNNING),
            ]
            assert [e.sequence for e in await journal.events(stored.operation_id, 1, 1)] == [2]

        journal_store.run(scenario)

    def test_commit_with_stale_version_raises_and_changes_nothing(
        self, journal_store: JournalStore
    ) -> None:
        """§5: a version mismatch under the same token is StaleVersion; the row is untouched."""

        async def scenario(journal: Journal) -> None:
            stored = await submitted(journal)
            newer = await journal.commit(bookkeeping(stored, next_action_at=T0))
            with pytest.raises(StaleVersion):
                await journal.commit(dispatch(stored))
            assert await journal.get(stored.operation_id) == newer
            assert await journal.attempts(stored.operation_id) == []
            assert len(await journal.events(stored.operation_id, 0, 10)) == 1

        journal_store.run(scenario)

    def test_racing_commits_from_one_version_let_exactly_one_win(
        self, journal_store: JournalStore
    ) -> None:
        """§5: concurrent compare-and-set writes from the same version: one wins,
        the rest are stale."""

        async def scenario(journal: Journal) -> None:
            other_handle = await journal_store.open()
            stored = await submitted(journal)
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

        journal_store.run(scenario)

    def test_illegal_transition_is_refused_and_changes_nothing(
        self, journal_store: JournalStore
    ) -> None:
        """§2: an edge not in the table raises IllegalTransition; no row,
        event or attempt changes."""

        async def scenario(journal: Journal) -> None:
            stored = await submitted(journal)
            commits = journal.commits
            with pytest.raises(IllegalTransition):
                await journal.commit(transition(stored, OpState.CANCELLING))
            with pytest.raises(IllegalTransition):
                await journal.commit(transition(stored, OpState.DISPATCH_UNKNOWN))
            assert await journal.get(stored.operation_id) == stored
            assert len(await journal.events(stored.operation_id, 0, 10)) == 1
            assert journal.commits == commits

        journal_store.run(scenario)

    def test_terminal_state_never_changes(self, journal_store: JournalStore) -> None:
        """C10/§8.6: a terminal row refuses any new state and any new outcome;
        release still records."""

        async def scenario(journal: Journal) -> None:
            stored = await submitted(journal)
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

        journal_store.run(scenario)

    def test_state_change_without_event_is_refused(self, journal_store: JournalStore) -> None:
        """C13: every transition carries its event; a state change without one writes nothing."""

        async def scenario(journal: Journal) -> None:
            stored = await submitted(journal)
            with pytest.raises(InvalidWrite):
                await journal.commit(bookkeeping(stored, state=OpState.CANCELLED))
            mismatched = transition(stored, OpState.CANCELLED)
            wrong_event = dataclasses.replace(mismatched.event, to_state=OpState.FAILED)  # type: ignore[type-var]
            with pytest.raises(InvalidWrite):
                await journal.commit(dataclasses.replace(mismatched, event=wrong_event))
            assert await journal.get(stored.operation_id) == stored

        journal_store.run(scenario)

    def test_fields_fixed_at_acceptance_never_change(self, journal_store: JournalStore) -> None:
        """C1: the envelope, digests and fencing token (outside claim) cannot be rewritten."""

        async def scenario(journal: Journal) -> None:
            stored = await submitted(journal)
            for field_values in (
                {"envelope": b"rebuilt"},
                {"envelope_digest": "0" * 64},
                {"principal": "mallory"},
                {"fencing_token": stored.fencing_token + 1},
            ):
                with pytest.raises(InvalidWrite):
                    await journal.commit(bookkeeping(stored, **field_values))
            assert await journal.get(stored.operation_id) == stored

        journal_store.run(scenario)

    def test_attempt_written_ahead_then_closed(self, journal_store: JournalStore) -> None:
        """C4/C13: the attempt row commits with DISPATCHING and is closed with its outcome later."""

        async def scenario(journal: Journal) -> None:
            stored = await submitted(journal)
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

        journal_store.run(scenario)

    def test_attempt_numbers_must_follow_attempt_count(self, journal_store: JournalStore) -> None:
        """C13: a new attempt must be number attempt_count+1; updating a missing one is refused."""

        async def scenario(journal: Journal) -> None:
            stored = await submitted(journal)
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

        journal_store.run(scenario)

    def test_writes_for_unknown_or_duplicate_ids_are_refused(
        self, journal_store: JournalStore
    ) -> None:
        """C1: a commit for an id never submitted, or a new operation reusing an id,
        writes nothing."""

        async def scenario(journal: Journal) -> None:
            stored = await submitted(journal, 1)
            ghost = new_operation(2)
            with pytest.raises(InvalidWrite):
                await journal.commit(dispatch(ghost))
            assert await journal.get(ghost.operation_id) is None
            same_id = new_operation(1, key="another key", request="another request")
            with pytest.raises(InvalidWrite):
                await journal.submit(same_id, first_event(same_id))
            assert await journal.get(stored.operation_id) == stored
            assert await journal.attempts(ghost.operation_id) == []

        journal_store.run(scenario)
