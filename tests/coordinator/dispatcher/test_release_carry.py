"""Releases (C10) ride on the next Dispatch to the same runner (issue 10):
dispatcher/releases.py on its own, then the dispatcher against a real runner."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.model import OpState
from coordinator_svc.dispatcher.metrics import DispatcherMetrics
from coordinator_svc.dispatcher.releases import ReleaseCarrier
from turnwire.testing.dispatcher_rig import Rig, sqlite_journal

A, B = "a" * 32, "b" * 32


def test_owed_releases_ride_on_a_dispatch_to_their_incarnation_else_go_alone() -> None:
    """A Dispatch takes the Releases owed to its runner and incarnation; the rest, and
    any left when the window ends, go alone; a Dispatch that may not have arrived
    gives its Releases back."""

    async def main() -> None:
        alone: list[str] = []
        metrics = DispatcherMetrics()
        carrier = ReleaseCarrier(lambda op, _: alone.append(op), metrics, window=0.2)
        carrier.owe("op_1", cmd.Release("r1", A, 1))
        carrier.owe("op_2", cmd.Release("r1", B, 1))
        carrier.owe("op_3", cmd.Release("r2", A, 1))
        taken = carrier.take("r1", A)
        assert [op for op, _ in taken] == ["op_1"]
        assert carrier.take("r1", A) == []
        carrier.give_back(taken)  # say that Dispatch got no answer
        assert metrics.releases_carried == 0
        await asyncio.sleep(0.4)
        assert sorted(alone) == ["op_1", "op_2", "op_3"]
        assert carrier.take("r1", B) == []  # sent alone already: nothing owed twice

    asyncio.run(main())


@pytest.mark.rule("C10")
def test_every_turn_is_released_once_whether_carried_or_alone(tmp_path: Path) -> None:
    """C10: sequential turns on one runner: each turn's Release rides on a later
    Dispatch or goes alone, never both, never neither: every row ends released."""

    async def scenario() -> None:
        rig = Rig(tmp_path, sqlite_journal(tmp_path / "journal.db"))
        try:
            await rig.start_runner()
            dispatcher = rig.make_dispatcher(status_poll=60.0)
            await dispatcher.start()
            await rig.watching("r1")
            done = []
            for _ in range(6):
                record = await rig.terminal(await rig.submit({"output": "hi"}))
                assert record.state is OpState.SUCCEEDED
                done.append(record.operation_id)
            for op_id in done:
                for _ in range(200):  # bounded: 4 s (the last goes alone after 50 ms)
                    row = await rig.runner_row("r1", op_id)
                    if row.operation.released:
                        break
                    await asyncio.sleep(0.02)
                assert row.operation.released, op_id
            metrics = dispatcher.metrics
            assert metrics.releases_carried + metrics.rpc_calls["Release"] == len(done)
            assert metrics.rpc_calls["Dispatch"] == len(done)
        finally:
            await rig.close()

    asyncio.run(scenario())
