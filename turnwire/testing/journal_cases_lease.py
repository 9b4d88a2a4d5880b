"""Conformance cases: §5 leases (``ports.LeasingJournal.claim``) and the fencing token.

Part of ``LeasingJournalConformance``; run them through it (see ``turnwire.testing``).
A new lease method gets its cases here: a ``test_`` method taking
``journal_store`` whose scenario runs with ``journal_store.run_leasing``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from coordinator_svc.ports import LeaseLost, LeasingJournal, StaleVersion
from turnwire.testing.journal_store import JournalCases, JournalStore
from turnwire.testing.records import T0, dispatch, first_event, new_operation, submitted


class LeaseCases(JournalCases):
    """Taking, renewing and losing the §5 lease on one operation."""

    def test_commit_after_lease_takeover_raises_lease_lost(
        self, journal_store: JournalStore
    ) -> None:
        """§5/§8.7: a replica whose fencing token moved on changes no row (LeaseLost)."""

        async def scenario(journal: LeasingJournal) -> None:
            stored = await submitted(journal)
            mine = await journal.claim(stored.operation_id, "replica-a", T0, 10)
            assert mine is not None
            later = T0 + timedelta(seconds=11)
            theirs = await journal.claim(stored.operation_id, "replica-b", later, 10)
            assert theirs is not None and theirs.fencing_token == mine.fencing_token + 1
            with pytest.raises(LeaseLost):
                await journal.commit(dispatch(mine))
            assert await journal.get(stored.operation_id) == theirs
            assert await journal.attempts(stored.operation_id) == []

        journal_store.run_leasing(scenario)

    def test_claim_takes_renews_refuses_and_fences_on_takeover(
        self, journal_store: JournalStore
    ) -> None:
        """§5: claim takes a free/expired/own lease, refuses a live one,
        bumps the token on takeover."""

        async def scenario(journal: LeasingJournal) -> None:
            stored = await submitted(journal)
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

        journal_store.run_leasing(scenario)

    def test_racing_claims_from_two_replicas_give_one_lease(
        self, journal_store: JournalStore
    ) -> None:
        """§5: two replicas claiming one operation at once: exactly one holds the lease."""

        async def scenario(journal: LeasingJournal) -> None:
            other_handle = await journal_store.open_leasing()
            stored = await submitted(journal)
            results = await asyncio.gather(
                *(
                    (journal if n % 2 else other_handle).claim(stored.operation_id, f"r{n}", T0, 30)
                    for n in range(6)
                )
            )
            winners = [r for r in results if r is not None]
            assert len(winners) == 1
            assert await journal.get(stored.operation_id) == winners[0]

        journal_store.run_leasing(scenario)

    def test_commits_counts_committed_write_transactions(self, journal_store: JournalStore) -> None:
        """bench: commits counts submit, commit and claim writes, not reads, replays or refusals."""

        async def scenario(journal: LeasingJournal) -> None:
            start = journal.commits
            stored = await submitted(journal, 1, key="k", request="r")
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

        journal_store.run_leasing(scenario)
