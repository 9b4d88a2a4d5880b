"""R3 on a live runner: a turn that finishes before its start confirmation is
written settles without one (issue 10); a turn still running gets it.

Every write is one durable change with the store's next sequence, so the
sequence a row reaches counts the writes made for it (each test makes sure no
other operation writes in between, or counts the one that does).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from runner_svc.storage.retention import RunnerRetention
from tests.runner.gated_executor import GatedExecutor
from tests.runner.live import live_runner
from turnwire.common.v1 import turn_pb2
from turnwire.runner.v1 import runner_pb2

R = runner_pb2


def test_a_fast_turn_settles_without_a_separate_start_confirmation(tmp_path: Path) -> None:
    """An echo turn finishes as it starts: admission with its launch intent (one write,
    issue 27), settlement, and no confirmation between; the settled row says STARTED
    with the start time, and is what the store holds after a restart."""
    store_path = tmp_path / "r.db"

    async def main() -> None:
        async with live_runner(store_path, executor="echo") as live:
            accepted = await live.dispatch("op_fast", output="hi")
            done = await live.wait_settled("op_fast")
            assert done.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            assert done.execution == turn_pb2.EXECUTION_STARTED
            assert done.result.output == b"hi"
            assert done.HasField("started_at")
            # Admission with its launch intent n, settlement n+1.
            assert accepted.operation.state == R.RUNNER_OPERATION_STATE_LAUNCHING
            assert done.sequence == accepted.operation.sequence + 1
        async with live_runner(store_path, executor="echo") as again:
            after = (await again.status("op_fast")).operation
            assert (after.state, after.execution) == (
                R.RUNNER_OPERATION_STATE_SUCCEEDED,
                turn_pb2.EXECUTION_STARTED,
            )
            assert after.sequence == done.sequence and after.started_at == done.started_at

    asyncio.run(main())


def test_a_slow_turn_gets_its_start_confirmation_while_it_runs(tmp_path: Path) -> None:
    """A turn still running when its confirmation comes up is confirmed as before:
    STARTED is visible (and durable) while it runs, then it settles."""

    async def main() -> None:
        async with live_runner(tmp_path / "r.db", executor="sleep") as live:
            accepted = await live.dispatch("op_slow", sleep_ms=400)
            running = await live.wait_state(
                "op_slow", lambda op: op.state == R.RUNNER_OPERATION_STATE_RUNNING
            )
            assert running.execution == turn_pb2.EXECUTION_STARTED
            assert running.HasField("started_at") and not running.HasField("settled_at")
            done = await live.wait_settled("op_slow")
            assert done.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            assert done.started_at == running.started_at
            # Admission with its launch intent, confirmation, settlement.
            assert done.sequence == accepted.operation.sequence + 2

    asyncio.run(main())


# Retention off: its first pass runs as the runner starts, and a pass's
# transaction waiting on the store's thread for the held write lock would take
# the tombstone's place there (the interleaving this test pins then does not
# happen, and its sequence check fails, as seen since §9 K6/K7 made passes longer).
NO_RETENTION = RunnerRetention(
    retain_released_seconds=None, retain_keys_seconds=None, retain_unreleased_seconds=None
)


def test_a_confirmation_still_queued_when_the_outcome_comes_is_withdrawn(
    tmp_path: Path,
) -> None:
    """The case the store's single writer makes common under load: the executor
    finishes while its start confirmation still waits behind another write. The
    confirmation is dropped; the settlement, written after, records the start."""
    store_path = tmp_path / "r.db"
    gate = asyncio.Event()
    gated = GatedExecutor(start_gate=gate, finish_at_once=False)

    async def main() -> None:
        async with live_runner(store_path, executor_override=gated, retention=NO_RETENTION) as live:
            jobs = live.runner.service.jobs
            # A Cancel for an unknown id whose lock is not the launching turn's.
            other = next(
                f"op_unknown_{n}"
                for n in range(1000)
                if jobs.lock(f"op_unknown_{n}") is not jobs.lock("op_queued")
            )
            accepted = await live.dispatch("op_queued")
            await asyncio.wait_for(gated.start_entered.wait(), 5)  # its intent is durable
            holder = sqlite3.connect(store_path, timeout=5, isolation_level=None)
            try:
                holder.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
                # The tombstone's write is taken up by the store's writer and waits.
                tombstone = asyncio.ensure_future(live.cancel(other))
                await asyncio.sleep(0.5)
                gate.set()  # started: its confirmation queues behind the tombstone
                await asyncio.sleep(0.1)
                gated.handles["op_queued"].finish.set()  # the outcome is in
                await asyncio.sleep(0.5)  # the job withdraws it and queues its settlement
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            assert (await asyncio.wait_for(tombstone, 5)).tombstoned
            done = await live.wait_settled("op_queued")
            assert (done.state, done.execution) == (
                R.RUNNER_OPERATION_STATE_SUCCEEDED,
                turn_pb2.EXECUTION_STARTED,
            )
            assert done.HasField("started_at")
            # Admission with its intent n, the tombstone n+1, the settlement n+2.
            assert done.sequence == accepted.operation.sequence + 2

    asyncio.run(main())
    assert gated.starts == ["op_queued"]
