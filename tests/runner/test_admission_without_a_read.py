"""Issue 10: a Dispatch for an id the runner's memory does not hold is admitted with no
read first; when the store knows the id after all (a row from an earlier incarnation),
the answer is the one a read would have given (R2), and nothing is written.

Real runners on a real SQLite file; the second incarnation opens the first one's store,
so its memory starts without the first one's rows.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from runner_svc.service import ServiceSettings
from tests.runner.live import live_runner
from tests.runner.storage.sql_reference import sql_last_sequence
from turnwire.runner.v1 import runner_pb2 as R


@pytest.mark.rule("R2")
def test_a_known_id_not_in_memory_is_answered_as_a_duplicate_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """R2: the guess "new" is refused by the store (the row exists): no second row, no
    second execution, no slot kept; the reply is the settled row."""
    store = tmp_path / "runner.db"

    async def main() -> None:
        async with live_runner(store) as first:
            await first.dispatch("op_known")
            await first.wait_settled("op_known")
        async with live_runner(store) as second:
            assert second.runner.service.store.remembered("op_known") is None
            before = sql_last_sequence(store)
            reply = await second.dispatch("op_known")
            assert reply.duplicate
            assert reply.operation.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            assert sql_last_sequence(store) == before
            info = await second.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
            assert all(pool.in_use == 0 for pool in info.pools)

    asyncio.run(main())


@pytest.mark.rule("R2", "R4")
def test_a_known_id_is_answered_as_a_duplicate_even_when_every_slot_is_taken(
    tmp_path: Path,
) -> None:
    """R2 before R4: with the only writable slot busy, a Dispatch of a known id the
    memory does not hold is answered with its row, not refused as NO_FREE_SLOT."""
    store = tmp_path / "runner.db"
    one_slot = ServiceSettings(writable_slots=1)

    async def main() -> None:
        async with live_runner(store) as first:
            await first.dispatch("op_known")
            await first.wait_settled("op_known")
        async with live_runner(store, settings=one_slot) as second:
            await second.dispatch("op_busy", sleep_ms=2_000)
            reply = await second.dispatch("op_known")
            assert reply.duplicate
            assert reply.operation.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            await second.cancel("op_busy")

    asyncio.run(main())
