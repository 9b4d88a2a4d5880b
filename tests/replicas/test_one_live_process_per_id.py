"""§5 O6 on real PostgreSQL: one live process per replica id.

Two journals opened on one database stand for two processes (each its own
engine and connections, as two coordinators have); their leases are real
rows, renewed with real clocks on a 1 s lease. In process, not as spawned
coordinators: the claim is about what a start reads in the shared journal,
and this keeps it to about two seconds of CI. (A spawned second coordinator
exits 1 with the same message: ``ReplicaIdInUse`` is a JournalError, which
``python -m coordinator_svc serve`` reports on one line with exit 1.)
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from coordinator_svc.dispatcher import utc_now
from coordinator_svc.dispatcher.ownership import (
    JUDGE_SHARE,
    Ownership,
    ReplicaIdInUse,
    ReplicaSettings,
)
from coordinator_svc.storage import migrate, open_journal
from turnwire.testing.records import submitted

pytestmark = pytest.mark.postgres

TTL = 1.0


def test_a_second_live_process_under_one_id_refuses_and_a_dead_ones_turns_are_taken(
    postgres_url: str,
) -> None:
    """While the first process of ``r1`` renews its leases, a second one starting as
    ``r1`` refuses (ReplicaIdInUse naming the live owner and --replica-id) and takes
    nothing; once the first stops renewing (dead), the next start of ``r1`` waits out
    the judging window, no longer, and ends its leases so its turn is adopted at once."""
    migrate(postgres_url)

    async def scenario() -> None:
        first_journal, second_journal = open_journal(postgres_url), open_journal(postgres_url)
        try:
            first = Ownership(first_journal, ReplicaSettings("r1", ttl=TTL), utc_now)
            await first.start()
            stored = await submitted(first_journal, 1)
            held = await first_journal.claim(stored.operation_id, first.owner, utc_now(), TTL)
            assert held is not None

            async def keep_renewing() -> None:
                for _ in range(100):  # bounded: far past what the test needs
                    await first.renew()
                    await asyncio.sleep(first.settings.renew_every)

            alive = asyncio.create_task(keep_renewing())
            try:
                second = Ownership(second_journal, ReplicaSettings("r1", ttl=TTL), utc_now)
                with pytest.raises(ReplicaIdInUse, match="--replica-id") as refused:
                    await second.start()
                assert first.owner in str(refused.value)
                row = await second_journal.get(stored.operation_id)
                assert row is not None and row.lease_owner == first.owner
                assert row.lease_expires_at is not None and row.lease_expires_at > utc_now()
                assert second.renewals == 0
            finally:
                alive.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await alive
            # The first process is dead now (no more renewals), its lease still live.
            third = Ownership(second_journal, ReplicaSettings("r1", ttl=TTL), utc_now)
            loop = asyncio.get_running_loop()
            began = loop.time()
            await third.start()
            waited = loop.time() - began
            assert waited < JUDGE_SHARE * TTL + 0.5, waited
            orphans = [r.operation_id for r in await third.orphans()]
            assert orphans == [stored.operation_id]
        finally:
            await first_journal.close()
            await second_journal.close()

    asyncio.run(scenario())
