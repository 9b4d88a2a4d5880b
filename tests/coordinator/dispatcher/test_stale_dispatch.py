"""C6c end to end (issue 27): a runner that refuses every Dispatch as stale, as one
whose clock runs ahead of the coordinator's would, against the real dispatcher."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from coordinator_svc.core.model import AttemptOutcome, Execution, OpState
from coordinator_svc.core.stale import STALE_STREAK_LIMIT
from coordinator_svc.storage import FakeJournal
from turnwire.testing.dispatcher_rig import Rig

# A floor 2 s past the runner's clock refuses what a clock 2 s ahead would: every
# Dispatch of this coordinator, whose stamps are at most a moment old.
AHEAD = -2.0


@pytest.mark.rule("C6c", "C14")
def test_a_runner_refusing_every_dispatch_as_stale_ends_the_turn_saying_clock_skew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """C6c: each stale refusal is sent again with a fresh stamp and never counted
    (max_attempts 2, yet STALE_STREAK_LIMIT attempts); then the turn ends TIMED_OUT,
    DISPATCH_STALE, NOT_STARTED, nothing run, its message naming clock skew. While it
    waits, its waiting_for names the runner and the skew, and one WARNING says so."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.start_runner(admission_window_seconds=AHEAD)
            dispatcher = rig.make_dispatcher(status_poll=60.0)
            await dispatcher.start()
            op_id = await rig.submit({"output": "hi"}, max_attempts=2)
            waited = ""
            for _ in range(500):  # bounded: 10 s
                record = await rig.journal.get(op_id)
                assert record is not None
                if record.state.terminal:
                    break
                said = dispatcher.waiting_for(record)
                waited = said if "as stale" in said else waited
                await asyncio.sleep(0.02)
            record = await rig.terminal(op_id)
            assert (record.state, record.error_reason, record.execution) == (
                OpState.TIMED_OUT,
                "DISPATCH_STALE",
                Execution.NOT_STARTED,
            )
            assert "clock skew: runner r1's clock reads at least" in (record.error_message or "")
            attempts = await rig.journal.attempts(op_id)
            assert len(attempts) == STALE_STREAK_LIMIT
            assert all(a.outcome is AttemptOutcome.REFUSED for a in attempts)
            assert all(a.detail.startswith("DISPATCH_STALE") for a in attempts)
            assert len({a.sent_at for a in attempts}) == len(attempts)  # fresh stamps
            assert rig.starts()[op_id] == 0
            assert "runner r1 refused its last" in waited and "clock skew" in waited
        finally:
            await rig.close()

    with caplog.at_level(logging.WARNING, logger="coordinator_svc.dispatcher"):
        asyncio.run(scenario())
    warnings = [r.getMessage() for r in caplog.records if "as stale" in r.getMessage()]
    assert len(warnings) == 1 and "clock skew" in warnings[0], warnings
