"""Issue 9 through a real runner: fair order across principals, the queue timeout,
and every waiting operation visible with its reason (PROTOCOL §8.2)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from coordinator_svc.core.model import Execution, OpState
from coordinator_svc.storage import FakeJournal
from turnwire.testing.dispatcher_rig import GHOST, Rig


def test_a_flood_does_not_make_another_principal_wait_behind_it(tmp_path: Path) -> None:
    """Fairness (issue 9): with 12 of one principal's turns waiting for the only slot, a
    turn another principal submits later runs next, not last (FIFO would run it 13th)."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.sized_dispatcher(1)
            flood = [await rig.submit({"sleep_ms": "150"}, principal="flood") for _ in range(12)]
            await rig.wait_for(flood[0], lambda r: r.state is OpState.RUNNING)
            quiet = await rig.submit({"sleep_ms": "10"}, principal="quiet")
            done = await rig.terminal(quiet, within=30.0)
            assert done.state is OpState.SUCCEEDED
            finished = [await rig.terminal(op, within=30.0) for op in flood]
            assert all(f.state is OpState.SUCCEEDED for f in finished)
            assert done.finished_at is not None
            ends = [f.finished_at for f in finished if f.finished_at is not None]
            before_quiet = [end for end in ends if end < done.finished_at]
            # The flood's running turn, and at most one more granted as it freed the slot.
            assert len(before_quiet) <= 2, len(before_quiet)
        finally:
            await rig.close()

    asyncio.run(scenario())


def test_a_turn_waiting_past_its_queue_timeout_ends_queue_timeout(tmp_path: Path) -> None:
    """Issue 9: the coordinator's queue timeout ends a turn still QUEUED behind a busy
    slot: TIMED_OUT, QUEUE_TIMEOUT, NOT_STARTED, no Dispatch, before the slot frees."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.sized_dispatcher(1, queue_timeout=0.5)
            holder = await rig.submit({"sleep_ms": "2500"})
            await rig.wait_for(holder, lambda r: r.state is OpState.RUNNING)
            waiting = await rig.submit()
            late = await rig.terminal(waiting)
            assert (late.state, late.error_reason) == (OpState.TIMED_OUT, "QUEUE_TIMEOUT")
            assert late.execution is Execution.NOT_STARTED and late.attempt_count == 0
            held = await rig.terminal(holder)
            assert held.finished_at is not None and late.finished_at is not None
            assert late.finished_at < held.finished_at
            assert rig.starts()[waiting] == 0
        finally:
            await rig.close()

    asyncio.run(scenario())


def test_a_waiting_turn_says_what_it_waits_for(tmp_path: Path) -> None:
    """§8.2: a turn held for a slot shows the slot it waits for and how many go first."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            dispatcher = await rig.sized_dispatcher(1)
            holder = await rig.submit({"sleep_ms": "1500"})
            await rig.wait_for(holder, lambda r: r.state is OpState.RUNNING)
            first, second = await rig.submit(), await rig.submit()
            for _ in range(100):  # bounded: 5 s, until both are held
                if dispatcher.room.scheduler.waiting() == 2:
                    break
                await asyncio.sleep(0.05)
            record = await rig.journal.get(second)
            assert record is not None and record.state is OpState.QUEUED
            said = dispatcher.waiting_for(record)
            assert said.startswith("waiting for a free WRITABLE slot in pool default: 1 of 1")
            assert "1 waiting turn(s) go first" in said
            running = await rig.journal.get(holder)
            assert running is not None and dispatcher.waiting_for(running) == ""
            for op in (holder, first, second):
                assert (await rig.terminal(op)).state is OpState.SUCCEEDED
        finally:
            await rig.close()

    asyncio.run(scenario())


def test_a_runner_that_is_gone_shows_on_the_turns_that_wait_for_it(tmp_path: Path) -> None:
    """§8.2 (issue 9): a runner nobody answers for is named on every operation waiting
    for it, with since when; nothing fails while it is merely gone."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            dispatcher = rig.make_dispatcher(extra=[GHOST])
            await dispatcher.start()
            op = await rig.submit()
            said = ""
            for _ in range(200):  # bounded: 10 s
                record = await rig.journal.get(op)
                assert record is not None and not record.state.terminal
                said = dispatcher.waiting_for(record)
                if "runner ghost is not answering since" in said:
                    break
                await asyncio.sleep(0.05)
            assert "runner ghost is not answering since" in said, said
        finally:
            await rig.close()

    asyncio.run(scenario())


def test_turns_for_a_runner_that_is_gone_wait_instead_of_preflighting_into_silence(
    tmp_path: Path,
) -> None:
    """Issue 9: after UNREACHABLE_AFTER unanswered calls a runner gets no grants until it
    answers again: 40 waiting turns for the only (dead) runner cost a handful of status
    calls, not one per turn per backoff, and every one of them says why it waits."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            dispatcher = rig.make_dispatcher(extra=[GHOST])
            await dispatcher.start()
            ops = [await rig.submit() for _ in range(40)]
            await asyncio.sleep(3.0)  # many backoff periods (TIMINGS: 20 ms .. 200 ms)
            calls = dispatcher.metrics.rpc_calls
            status_calls = calls["GetOperationStatus"] + calls["BatchGetOperationStatus"]
            assert status_calls <= 12, status_calls
            for op in ops:
                record = await rig.journal.get(op)
                assert record is not None and record.state is OpState.QUEUED
                assert "runner ghost is not answering" in dispatcher.waiting_for(record)
        finally:
            await rig.close()

    asyncio.run(scenario())
