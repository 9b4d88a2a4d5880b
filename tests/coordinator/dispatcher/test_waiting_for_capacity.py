"""Issue 9 (first slice): a busy runner is not a failing runner. A capacity
refusal (NO_FREE_SLOT, SHUTTING_DOWN) proves only that the runner is full, so it
never counts toward max_attempts and never fails a turn; the turn waits QUEUED
and its events say what it waits for."""

from __future__ import annotations

import asyncio
from pathlib import Path

from coordinator_svc.core.model import AttemptOutcome, OpState
from coordinator_svc.storage import FakeJournal
from tests.coordinator.dispatcher.rig import Rig

TURNS = 6
SLOTS = 2


def test_more_turns_than_slots_all_succeed_with_a_low_max_attempts(tmp_path: Path) -> None:
    """Regression: with no faults, turns beyond the runner's slots ended TIMED_OUT
    MAX_ATTEMPTS_EXCEEDED without ever running."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.start_runner(slots=SLOTS)
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            ops = [await rig.submit({"sleep_ms": "400"}, max_attempts=2) for _ in range(TURNS)]
            done = [await rig.terminal(op, within=30.0) for op in ops]
            assert [d.state for d in done] == [OpState.SUCCEEDED] * TURNS, [
                (d.state, d.error_reason) for d in done
            ]
            assert all(rig.starts()[op] == 1 for op in ops)
            refused = 0
            for op in ops:
                attempts = await rig.journal.attempts(op)
                refused += sum(a.outcome is AttemptOutcome.REFUSED for a in attempts)
                assert attempts[-1].outcome is AttemptOutcome.ACCEPTED
            assert refused > 0, "the runner was never full: the test proves nothing"
            events = [e for op in ops for e in await rig.journal.events(op, 0, 1000)]
            waiting = [e for e in events if e.to_state is OpState.QUEUED and e.from_state]
            assert waiting and all("waiting for a free WRITABLE slot" in e.detail for e in waiting)
        finally:
            await rig.close()

    asyncio.run(scenario())
