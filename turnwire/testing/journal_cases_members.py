"""Conformance cases: runner membership (``ports.AdminJournal``, PROTOCOL.md §11).

Part of ``JournalConformance``; run them through it (see ``turnwire.testing``).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.membership import (
    MemberAction,
    MemberRefusal,
    MembershipRecord,
    added,
)
from coordinator_svc.core.model import OpState
from coordinator_svc.core.operator import DrainRecord
from coordinator_svc.ports import Journal, MembershipRefused
from turnwire.testing.journal_cases_admin import _admin
from turnwire.testing.journal_store import JournalCases, JournalStore
from turnwire.testing.records import T0, dispatch, submitted, transition

R1 = RunnerEndpoint("runner-a", "127.0.0.1:7001", "default")


def _add(endpoint: RunnerEndpoint = R1, by: str = "ops") -> MembershipRecord:
    return added(endpoint, by, "capacity", T0)


async def _remove(
    journal: Journal, runner: str = "runner-a", *, generation: int = 0, force: bool = False
) -> tuple[MembershipRecord, bool]:
    return await _admin(journal).remove_runner(
        runner,
        generation=generation,
        by="ops",
        reason="retired",
        at=T0 + timedelta(minutes=1),
        force=force,
    )


class MembershipCases(JournalCases):
    """Adding, removing and reading the runner set (§11 M1-M4)."""

    def test_add_stores_a_member_once_and_refuses_other_fields(
        self, journal_store: JournalStore
    ) -> None:
        """M1/M2: the first add is generation 1; the same fields again are a replay;
        another address is RUNNER_CONFLICT naming the live member, nothing stored."""

        async def scenario(journal: Journal) -> None:
            admin = _admin(journal)
            stored, fresh = await admin.add_runner(_add())
            assert fresh and stored.sequence == 1 and stored.action is MemberAction.ADDED
            assert stored.endpoint == dataclasses.replace(R1, generation=1)
            assert await admin.add_runner(_add(by="someone-else")) == (stored, False)
            moved = RunnerEndpoint("runner-a", "127.0.0.1:7002")
            with pytest.raises(MembershipRefused) as refused:
                await admin.add_runner(_add(moved))
            assert refused.value.refusal is MemberRefusal.RUNNER_CONFLICT
            assert refused.value.member == stored
            roster = await admin.runner_roster()
            assert roster.latest == (stored,) and roster.members == (stored.endpoint,)

        journal_store.run(scenario)

    def test_remove_needs_a_drain_and_no_bound_turn(self, journal_store: JournalStore) -> None:
        """M3: not drained is RUNNER_NOT_DRAINED; drained with a turn bound is
        RUNNER_HAS_TURNS (with the count); once that turn ended the removal is
        stored, the drain goes with it, and asking again is a replay."""

        async def scenario(journal: Journal) -> None:
            admin = _admin(journal)
            await admin.add_runner(_add())
            sent = await journal.commit(dispatch(await submitted(journal, 1), "runner-a"))
            with pytest.raises(MembershipRefused) as refused:
                await _remove(journal)
            assert refused.value.refusal is MemberRefusal.RUNNER_NOT_DRAINED
            await admin.drain(DrainRecord("runner-a", "ops", "retire", T0))
            assert await admin.bound_turns() == {"runner-a": 1}
            with pytest.raises(MembershipRefused) as refused:
                await _remove(journal)
            assert refused.value.refusal is MemberRefusal.RUNNER_HAS_TURNS
            assert refused.value.turns == 1
            assert (await admin.runner_roster()).members != ()
            unknown = await journal.commit(transition(sent, OpState.DISPATCH_UNKNOWN))
            await journal.commit(transition(unknown, OpState.TIMED_OUT))
            assert await admin.bound_turns() == {}
            gone, fresh = await _remove(journal)
            assert fresh and gone.action is MemberAction.REMOVED and gone.sequence == 2
            assert not gone.forced and gone.bound_turns == 0
            roster = await admin.runner_roster()
            assert roster.members == () and roster.drains == () and roster.latest == (gone,)
            assert await _remove(journal) == (gone, False)

        journal_store.run(scenario)

    def test_forced_removal_records_the_turns_it_left(self, journal_store: JournalStore) -> None:
        """M4: with force, neither drain nor an idle runner is needed; the record
        says it was forced and how many turns were bound then."""

        async def scenario(journal: Journal) -> None:
            admin = _admin(journal)
            await admin.add_runner(_add())
            await journal.commit(dispatch(await submitted(journal, 1), "runner-a"))
            gone, fresh = await _remove(journal, force=True)
            assert fresh and gone.forced and gone.bound_turns == 1
            assert (await admin.runner_roster()).members == ()

        journal_store.run(scenario)

    def test_a_name_added_again_is_a_new_generation(self, journal_store: JournalStore) -> None:
        """M7: after a removal the name may be added with any fields, as generation 3;
        removing "generation 1" then finds no such member; unknown names neither."""

        async def scenario(journal: Journal) -> None:
            admin = _admin(journal)
            await admin.add_runner(_add())
            await _remove(journal, force=True)
            moved = RunnerEndpoint("runner-a", "127.0.0.1:7002", "gpu")
            again, fresh = await admin.add_runner(_add(moved))
            assert fresh and again.sequence == 3 and again.endpoint.generation == 3
            for runner, generation in (("runner-a", 1), ("runner-z", 0)):
                with pytest.raises(MembershipRefused) as refused:
                    await _remove(journal, runner, generation=generation, force=True)
                assert refused.value.refusal is MemberRefusal.RUNNER_NOT_FOUND
            assert (await admin.runner_roster()).members == (again.endpoint,)

        journal_store.run(scenario)
