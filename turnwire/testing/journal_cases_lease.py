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

    def test_renew_leases_extends_every_open_lease_of_its_owner_only(
        self, journal_store: JournalStore
    ) -> None:
        """§5: one renewal pushes back the owner's leases on open operations (a
        lapsed one too: nobody adopted it), keeps version and token, and touches
        no other owner's lease and no finished operation's."""

        async def scenario(journal: LeasingJournal) -> None:
            mine = [await submitted(journal, n) for n in (1, 2)]
            other = await submitted(journal, 3)
            for record in mine:
                assert await journal.claim(record.operation_id, "a", T0, 10) is not None
            theirs = await journal.claim(other.operation_id, "b", T0, 10)
            assert theirs is not None
            later = T0 + timedelta(seconds=30)  # a's leases lapsed, nobody took them
            before = [await journal.get(r.operation_id) for r in mine]
            assert await journal.renew_leases("a", later, 10) == 2
            for old in before:
                assert old is not None
                now = await journal.get(old.operation_id)
                assert now is not None
                assert now.lease_expires_at == later + timedelta(seconds=10)
                assert (now.version, now.fencing_token) == (old.version, old.fencing_token)
            assert await journal.get(other.operation_id) == theirs
            assert await journal.renew_leases("nobody", later, 10) == 0

        journal_store.run_leasing(scenario)

    def test_orphans_are_open_operations_of_lapsed_or_no_owners(
        self, journal_store: JournalStore
    ) -> None:
        """§5: adoptable = open, and unowned or another owner's lapsed lease;
        never a live lease, never the asker's own; oldest first, bounded."""

        async def scenario(journal: LeasingJournal) -> None:
            unowned = await submitted(journal, 1)
            lapsed = await submitted(journal, 2)
            live = await submitted(journal, 3)
            own = await submitted(journal, 4)
            assert await journal.claim(lapsed.operation_id, "b", T0, 10) is not None
            assert await journal.claim(live.operation_id, "b", T0 + timedelta(seconds=20), 10)
            assert await journal.claim(own.operation_id, "a", T0, 10) is not None
            at = T0 + timedelta(seconds=25)
            found = await journal.orphans("a", at, 10)
            assert [r.operation_id for r in found] == [unowned.operation_id, lapsed.operation_id]
            assert [r.operation_id for r in await journal.orphans("a", at, 1)] == [
                unowned.operation_id
            ]

        journal_store.run_leasing(scenario)

    def test_expire_leases_ends_a_prefix_of_owners_but_the_kept_one(
        self, journal_store: JournalStore
    ) -> None:
        """§5: ending a replica's previous process's leases (its name as the
        prefix) or this process's own at a clean stop; others are untouched."""

        async def scenario(journal: LeasingJournal) -> None:
            old = await submitted(journal, 1)
            current = await submitted(journal, 2)
            stranger = await submitted(journal, 3)
            assert await journal.claim(old.operation_id, "r1#old", T0, 60) is not None
            assert await journal.claim(current.operation_id, "r1#new", T0, 60) is not None
            assert await journal.claim(stranger.operation_id, "r10#x", T0, 60) is not None
            at = T0 + timedelta(seconds=1)
            assert await journal.expire_leases("r1#", "r1#new", at) == 1
            ended = await journal.get(old.operation_id)
            assert ended is not None and ended.lease_expires_at == at
            assert [r.operation_id for r in await journal.orphans("r2#y", at, 10)] == [
                old.operation_id
            ]
            kept = await journal.get(current.operation_id)
            assert kept is not None and kept.lease_expires_at == T0 + timedelta(seconds=60)
            far = await journal.get(stranger.operation_id)
            assert far is not None and far.lease_expires_at == T0 + timedelta(seconds=60)
            assert await journal.expire_leases("r1#new", "", at) == 1

        journal_store.run_leasing(scenario)

    def test_live_leases_name_each_other_owner_of_a_prefix_with_its_latest_expiry(
        self, journal_store: JournalStore
    ) -> None:
        """§5 O6: what a replica starting under a name reads to judge its earlier
        processes: each owner of the name but the kept one, with the latest expiry
        of its live leases on open operations; a lapsed lease, another name's (even
        one the prefix starts, ``r10``) and the kept owner's are not named."""

        async def scenario(journal: LeasingJournal) -> None:
            ops = [await submitted(journal, n) for n in range(1, 6)]
            assert await journal.claim(ops[0].operation_id, "r1#old", T0, 60) is not None
            assert await journal.claim(ops[1].operation_id, "r1#old", T0, 90) is not None
            assert await journal.claim(ops[2].operation_id, "r1#gone", T0, 5) is not None
            assert await journal.claim(ops[3].operation_id, "r1#new", T0, 60) is not None
            assert await journal.claim(ops[4].operation_id, "r10#x", T0, 60) is not None
            at = T0 + timedelta(seconds=10)
            assert await journal.live_leases("r1#", "r1#new", at) == {
                "r1#old": T0 + timedelta(seconds=90)
            }
            await journal.renew_leases("r1#old", at, 100)
            assert await journal.live_leases("r1#", "r1#new", at) == {
                "r1#old": at + timedelta(seconds=100)
            }
            assert await journal.live_leases("r2#", "", at) == {}

        journal_store.run_leasing(scenario)
