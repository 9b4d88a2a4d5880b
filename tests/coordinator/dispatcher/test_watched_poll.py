"""C9a: while a live watch stream follows the incarnation a RUNNING turn is bound
to, its fallback status poll waits ``watched_status_poll``; without a live watch it
waits ``status_poll``. Issue 27: at a 10 s poll, 10,000 held turns cost an idle
coordinator most of a core in status reads and schedule commits."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from coordinator_svc.core.model import OpState
from coordinator_svc.storage import FakeJournal
from tests.support.fault_interceptor import FaultInterceptor
from turnwire.testing.dispatcher_rig import TIMINGS, Rig

FAST_POLL = dataclasses.replace(TIMINGS, status_poll=0.2, watched_status_poll=300.0)
WATCH_AND_INFO = ("WatchOperations", "GetRunnerInfo")


async def _held_running(rig: Rig) -> str:
    await rig.start_runner()
    dispatcher = rig.make_dispatcher(timings=FAST_POLL)
    await dispatcher.start()
    op_id = await rig.submit({"sleep_ms": "30000"})
    await rig.wait_for(op_id, lambda r: r.state is OpState.RUNNING)
    return op_id


@pytest.mark.rule("C9a")
def test_a_watched_running_turn_is_not_polled_at_the_short_interval(tmp_path: Path) -> None:
    """C9a: bound to the incarnation the live watch follows, a RUNNING turn is
    scheduled ``watched_status_poll`` ahead, and 1.5 s (seven short polls) sends
    no status read and writes nothing."""

    async def scenario() -> None:
        faults = FaultInterceptor()
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            op_id = await _held_running(rig)
            await asyncio.sleep(0.3)  # a poll the RUNNING commit scheduled before the watch knew
            before = await rig.journal.get(op_id)
            reads = faults.calls["BatchGetOperationStatus"] + faults.calls["GetOperationStatus"]
            await asyncio.sleep(1.5)
            after = await rig.journal.get(op_id)
            assert before is not None and after is not None
            assert after.state is OpState.RUNNING and after.version == before.version
            assert after.next_action_at is not None
            assert after.next_action_at > datetime.now(UTC) + timedelta(seconds=250)
            reads_after = faults.calls["BatchGetOperationStatus"]
            assert reads_after + faults.calls["GetOperationStatus"] == reads
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C9", "C9a")
def test_a_lost_watch_hands_its_running_turns_back_to_the_short_poll(
    tmp_path: Path,
) -> None:
    """C9a's other side: the watch (and GetRunnerInfo, which identifies the runner
    for it) lost for good while status reads still pass, the turn scheduled 300 s
    ahead is looked at again and then polled every ``status_poll``."""

    async def scenario() -> None:
        faults = FaultInterceptor()
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            op_id = await _held_running(rig)
            await asyncio.sleep(0.3)
            faults.block(*WATCH_AND_INFO)  # cut at the next heartbeat (2 s)
            reads = faults.calls["BatchGetOperationStatus"] + faults.calls["GetOperationStatus"]
            await asyncio.sleep(3.5)
            reads_after = faults.calls["BatchGetOperationStatus"]
            assert reads_after + faults.calls["GetOperationStatus"] - reads >= 3
            record = await rig.journal.get(op_id)
            assert record is not None and record.state is OpState.RUNNING
        finally:
            await rig.close()

    asyncio.run(scenario())
