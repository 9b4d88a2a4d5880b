"""The runner set changed while the dispatcher runs (PROTOCOL.md §11 M5, M6, M7).

Real runners on 127.0.0.1:0, a real dispatcher; the set is changed the way the
coordinator does it, through ``Dispatcher.set_runners`` (the one entry point
the journal's set and the drains come through).
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import grpc
import pytest

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.model import Execution, OpState, TurnKind
from coordinator_svc.dispatcher import Dispatcher
from coordinator_svc.storage import FakeJournal
from turnwire.testing.dispatcher_rig import Rig


def endpoint(rig: Rig, name: str, generation: int = 1) -> RunnerEndpoint:
    return RunnerEndpoint(name, rig.runners[name].address, generation=generation)


async def settled_tasks(dispatcher: Dispatcher) -> int:
    """Tasks alive in this loop once the members that left have closed their channels."""
    await dispatcher._calls.drain()
    await asyncio.sleep(0.2)
    return len(asyncio.all_tasks())


@pytest.mark.rule("M5")
def test_a_runner_added_at_run_time_takes_turns_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """M5: a member added while the dispatcher runs gets a watch and takes turns (r1
    drained, so every new turn goes there); removed again, its watch task ends, its
    channel closes and its slots are forgotten: the loop holds as many tasks as
    before it was added."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.start_runner("r1")
            await rig.start_runner("r2")
            dispatcher = rig.make_dispatcher()
            r1, r2 = endpoint(rig, "r1", 0), endpoint(rig, "r2")
            await dispatcher.set_runners([r1], ())  # r2 not a member yet
            await dispatcher.start()
            first = await rig.terminal(await rig.submit())
            assert first.runner == "r1"
            before = await settled_tasks(dispatcher)

            await dispatcher.set_runners([r1, r2], {"r1"})
            await rig.watching("r2")
            ops = [await rig.submit() for _ in range(3)]
            ended = [await rig.terminal(op) for op in ops]
            assert {(r.state, r.runner) for r in ended} == {(OpState.SUCCEEDED, "r2")}
            assert all(count == 1 for count in rig.starts().values())

            # Its watch task and its client: what must not outlive the member.
            watch_task = dispatcher.members._tasks["r2"]
            client = dispatcher._calls.clients["r2"]
            change = await dispatcher.set_runners([r1], ())
            assert change.removed == (r2,)
            assert watch_task.done()  # ended before set_runners returned
            assert "r2" not in dispatcher.members.watches
            assert not dispatcher._calls.configured("r2")
            assert not dispatcher.room.scheduler.known("r2")
            assert await settled_tasks(dispatcher) == before
            with pytest.raises(grpc.aio.UsageError):  # its channel is closed
                await client.info()
            last = await rig.terminal(await rig.submit())
            assert (last.state, last.runner) == (OpState.SUCCEEDED, "r1")
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("M6")
def test_a_turn_running_on_a_runner_that_leaves_ends_honestly_and_goes_nowhere(
    tmp_path: Path,
) -> None:
    """M6: a RUNNING turn whose runner leaves the set ends TIMED_OUT RUNNER_REMOVED at
    once, execution STARTED (its start was confirmed); it is never sent to the
    runner that stays, and it started exactly once."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.start_runner("r1")
            await rig.start_runner("r2")
            dispatcher = rig.make_dispatcher(status_poll=60.0)
            r1, r2 = endpoint(rig, "r1"), endpoint(rig, "r2")
            await dispatcher.set_runners([r1, r2], {"r2"})
            await dispatcher.start()
            op_id = await rig.submit({"sleep_ms": "20000"})
            await rig.wait_for(op_id, lambda r: r.state is OpState.RUNNING)
            for _ in range(200):  # bounded: until the runner confirmed the start
                if rig.starts()[op_id]:
                    break
                await asyncio.sleep(0.02)
            await dispatcher.set_runners([r2], ())
            record = await rig.terminal(op_id, within=10.0)
            assert (record.state, record.error_reason) == (OpState.TIMED_OUT, "RUNNER_REMOVED")
            assert record.execution is Execution.STARTED and record.runner == "r1"
            attempts = await rig.journal.attempts(op_id)
            assert [a.runner for a in attempts] == ["r1"]
            assert rig.starts()[op_id] == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("M7")
def test_a_name_added_again_is_a_new_member_with_its_own_watch(tmp_path: Path) -> None:
    """M7: the same name with a new generation is closed and built anew: a new watch
    (it learns the runner's identity again) and fresh slots."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.start_runner("r1")
            dispatcher = rig.make_dispatcher()
            first = endpoint(rig, "r1", 1)
            await dispatcher.set_runners([first], ())
            await dispatcher.start()
            await rig.watching("r1")
            old_watch = dispatcher.watch_on("r1")
            again = dataclasses.replace(first, generation=3)
            change = await dispatcher.set_runners([again], ())
            assert change.added == (again,) and change.removed == (first,)
            assert dispatcher.watch_on("r1") is not old_watch
            await rig.watching("r1")
            record = await rig.terminal(await rig.submit())
            assert (record.state, record.runner) == (OpState.SUCCEEDED, "r1")
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("M5")
def test_a_member_this_process_cannot_call_is_none_here(tmp_path: Path) -> None:
    """M5: without runner credentials a member of the journal's set cannot be called:
    it is not a member here (no grant, no turn for its pool is accepted), and applying
    the set again changes nothing."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            dispatcher = rig.make_dispatcher(runner_credentials=None)
            member = RunnerEndpoint("r1", "127.0.0.1:9", generation=1)
            for _ in range(2):
                await dispatcher.set_runners([member], ())
                assert dispatcher.runners == () and not dispatcher.can_add_runners()
            assert not dispatcher.has_runner_for("default", TurnKind.WRITABLE)
        finally:
            await rig.close()

    asyncio.run(scenario())
