"""§5 ownership, in process: when a replica may act, what it renews, what it
adopts, and that a replica whose leases are not current acts on nothing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import pytest

from coordinator_svc.config import DispatchTimings
from coordinator_svc.core.events import CancelRequested, Tick
from coordinator_svc.core.model import OpState
from coordinator_svc.dispatcher import Dispatcher
from coordinator_svc.dispatcher.ownership import (
    JUDGE_SHARE,
    VALID_SHARE,
    LeasesNotCurrent,
    Ownership,
    ReplicaIdInUse,
    ReplicaSettings,
)
from coordinator_svc.feed import ChangeFeed
from coordinator_svc.storage import FakeJournal
from turnwire.testing.records import T0, submitted

TTL = 10.0


class Clocks:
    """The wall clock the journal compares leases with, and the monotonic clock
    the replica times its own leases by (a pause moves both)."""

    def __init__(self) -> None:
        self.wall = T0
        self.mono = 1000.0

    def now(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


class Sleeps:
    """The replica's sleep: moves the clocks instead of waiting, counts the time
    slept, and runs ``meanwhile`` (what other processes do during it)."""

    def __init__(self, clocks: Clocks) -> None:
        self.clocks = clocks
        self.slept = 0.0
        self.meanwhile: Callable[[], Awaitable[object]] | None = None

    async def __call__(self, seconds: float) -> None:
        self.clocks.advance(seconds)
        self.slept += seconds
        if self.meanwhile is not None:
            await self.meanwhile()


def _ownership(
    journal: FakeJournal, clocks: Clocks, name: str = "r1", sleeps: Sleeps | None = None
) -> Ownership:
    return Ownership(
        journal,
        ReplicaSettings(name, ttl=TTL),
        clocks.now,
        clocks.monotonic,
        sleep=sleeps or Sleeps(clocks),
    )


@pytest.mark.rule("O4")
def test_leases_are_current_only_for_part_of_the_ttl_after_a_renewal() -> None:
    """§5 O4: current for 0.8 TTL after a renewal began; a new process is not current."""

    async def scenario() -> None:
        clocks = Clocks()
        own = _ownership(FakeJournal(), clocks)
        assert not own.current()  # nothing renewed yet: a new process acts on nothing
        with pytest.raises(LeasesNotCurrent):
            own.check_current()
        await own.start()
        assert own.current()
        clocks.advance(VALID_SHARE * TTL - 0.01)
        assert own.current()
        clocks.advance(0.02)  # a pause past the safe share: not current until renewed
        assert not own.current()
        with pytest.raises(LeasesNotCurrent):
            own.check_current()
        assert await own.renew()
        assert own.current()

    asyncio.run(scenario())


@pytest.mark.rule("O4")
def test_a_failed_renewal_leaves_the_leases_lapsed_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """§5 O4: a renewal the journal refused changes nothing; one ERROR per lapse."""

    async def scenario() -> None:
        clocks = Clocks()
        journal = FakeJournal()
        own = _ownership(journal, clocks)
        await own.start()
        journal.set_available(False)
        clocks.advance(TTL)
        with caplog.at_level(logging.WARNING, "coordinator_svc.ownership"):
            assert not await own.renew()
            own.note_lapse()
            own.note_lapse()
            assert not own.current()
            journal.set_available(True)
            assert await own.renew()
        lapsed = [r for r in caplog.records if "leases lapsed" in r.getMessage()]
        assert len(lapsed) == 1 and lapsed[0].levelno == logging.ERROR
        assert any("current again" in r.getMessage() for r in caplog.records)

    asyncio.run(scenario())


@pytest.mark.rule("O3")
def test_a_restart_under_the_same_id_ends_the_previous_process_leases_at_once() -> None:
    """§5 O3. Same --replica-id: the old process is gone, its operations become orphans
    now, not a TTL later; another id's leases stay."""

    async def scenario() -> None:
        clocks = Clocks()
        journal = FakeJournal()
        old = _ownership(journal, clocks)
        peer = _ownership(journal, clocks, "r2")
        mine = await submitted(journal, 1)
        theirs = await submitted(journal, 2)
        assert await journal.claim(mine.operation_id, old.owner, clocks.now(), TTL)
        assert await journal.claim(theirs.operation_id, peer.owner, clocks.now(), TTL)
        sleeps = Sleeps(clocks)
        new = _ownership(journal, clocks, sleeps=sleeps)
        assert new.owner != old.owner
        await new.start()
        assert [r.operation_id for r in await new.orphans()] == [mine.operation_id]
        # §5 O6: it watched the old process's live leases for half a TTL, no longer.
        assert sleeps.slept == pytest.approx(JUDGE_SHARE * TTL)

    asyncio.run(scenario())


@pytest.mark.rule("O6")
def test_a_start_with_no_live_lease_of_its_id_waits_for_nothing() -> None:
    """§5 O6: nothing to judge (a first start, another id's leases, or the earlier
    process's leases already lapsed): the start sleeps not at all."""

    async def scenario() -> None:
        clocks = Clocks()
        journal = FakeJournal()
        peer = _ownership(journal, clocks, "r2")
        old = _ownership(journal, clocks)
        lapsed = await submitted(journal, 1)
        theirs = await submitted(journal, 2)
        assert await journal.claim(lapsed.operation_id, old.owner, clocks.now(), TTL)
        assert await journal.claim(theirs.operation_id, peer.owner, clocks.now(), TTL)
        clocks.advance(TTL + 1)
        assert await peer.renew()
        sleeps = Sleeps(clocks)
        await _ownership(journal, clocks, sleeps=sleeps).start()
        assert sleeps.slept == 0

    asyncio.run(scenario())


@pytest.mark.rule("O6")
def test_a_start_under_the_id_of_a_live_process_refuses_and_takes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """§5 O6. Two live processes given one --replica-id: the earlier one keeps
    renewing while the second starts, so the second refuses with an ERROR naming
    the fix, having ended none of its leases and taken none of its own."""

    async def scenario() -> None:
        clocks = Clocks()
        journal = FakeJournal()
        running = _ownership(journal, clocks)
        await running.start()
        stored = await submitted(journal, 1)
        held = await journal.claim(stored.operation_id, running.owner, clocks.now(), TTL)
        assert held is not None
        sleeps = Sleeps(clocks)
        sleeps.meanwhile = running.renew  # the earlier process is alive
        second = _ownership(journal, clocks, sleeps=sleeps)
        commits = journal.commits
        with (
            caplog.at_level(logging.INFO, logger="coordinator_svc.ownership"),
            pytest.raises(ReplicaIdInUse, match="--replica-id"),
        ):
            await second.start()
        assert sleeps.slept <= JUDGE_SHARE * TTL
        after = await journal.get(stored.operation_id)
        assert after is not None and after.lease_owner == running.owner
        assert after.lease_expires_at is not None and after.lease_expires_at > clocks.now()
        assert journal.commits == commits
        assert not second.current() and second.renewals == 0
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and running.owner in errors[0].getMessage()

    asyncio.run(scenario())


@pytest.mark.rule("O6", "O3")
def test_a_start_while_the_earlier_process_hands_off_goes_ahead_at_once() -> None:
    """§5 O6: an earlier process of the id that stops cleanly while the new one
    watches (its leases ended, O3) is gone: the start stops watching and goes on."""

    async def scenario() -> None:
        clocks = Clocks()
        journal = FakeJournal()
        stopping = _ownership(journal, clocks)
        await stopping.start()
        stored = await submitted(journal, 1)
        assert await journal.claim(stored.operation_id, stopping.owner, clocks.now(), TTL)
        sleeps = Sleeps(clocks)
        sleeps.meanwhile = stopping.hand_off
        new = _ownership(journal, clocks, sleeps=sleeps)
        await new.start()
        assert sleeps.slept < JUDGE_SHARE * TTL
        assert [r.operation_id for r in await new.orphans()] == [stored.operation_id]

    asyncio.run(scenario())


def _dispatcher(journal: FakeJournal, own: Ownership) -> Dispatcher:
    return Dispatcher(journal, (), DispatchTimings(), ChangeFeed(), ownership=own)


@pytest.mark.rule("O4")
def test_a_replica_whose_leases_lapsed_writes_nothing_even_on_its_own_operation() -> None:
    """§5 O4, §8.7. The zombie rule: after a pause (monotonic clock far ahead), every step
    raises LeasesNotCurrent before reading further; the journal is unchanged."""

    async def scenario() -> None:
        clocks = Clocks()
        journal = FakeJournal()
        own = _ownership(journal, clocks)
        await own.start()
        stored = await submitted(journal, 1)
        claimed = await journal.claim(stored.operation_id, own.owner, clocks.now(), TTL)
        assert claimed is not None
        dispatcher = _dispatcher(journal, own)
        clocks.advance(TTL)
        commits = journal.commits
        for event in (Tick(), CancelRequested()):
            with pytest.raises(LeasesNotCurrent):
                await dispatcher.operations.step(stored.operation_id, event)
        assert journal.commits == commits
        assert await journal.get(stored.operation_id) == claimed

    asyncio.run(scenario())


@pytest.mark.rule("O1", "O3")
def test_a_live_lease_of_another_replica_is_left_alone_and_a_lapsed_one_adopted() -> None:
    """§5 O1/O3: a bystander steps nothing; an adopter claims (token + 1) then steps."""

    async def scenario() -> None:
        clocks = Clocks()
        journal = FakeJournal()
        own = _ownership(journal, clocks)
        peer = _ownership(journal, clocks, "r2")
        await own.start()
        stored = await submitted(journal, 1)
        theirs = await journal.claim(stored.operation_id, peer.owner, clocks.now(), TTL)
        assert theirs is not None
        dispatcher = _dispatcher(journal, own)
        assert await dispatcher.operations.step(stored.operation_id, Tick()) is None
        assert await journal.get(stored.operation_id) == theirs
        clocks.advance(TTL + 1)
        assert await own.renew()
        step = await dispatcher.operations.step(stored.operation_id, Tick())
        assert step is not None
        assert step.record.lease_owner == own.owner
        assert step.record.fencing_token == theirs.fencing_token + 1
        assert step.record.state is OpState.QUEUED
        assert own.adopted == 1

    asyncio.run(scenario())
