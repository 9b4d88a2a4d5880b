"""Routing with two real runners (C6: only QUEUED chooses; a bound operation never moves)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from coordinator_svc.core.model import Execution, OpState
from coordinator_svc.storage import FakeJournal
from tests.support.fault_interceptor import DROP_REQUEST, DROP_RESPONSE, Fault, FaultInterceptor
from turnwire.testing.dispatcher_rig import TIMINGS, Rig


@pytest.mark.rule("C6")
def test_queued_operation_avoids_an_unreachable_runner(tmp_path: Path) -> None:
    """C6: a QUEUED operation is routed away from a runner that does not answer; runs once."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            down = await rig.start_runner("a")  # first by name: the router's first choice
            up = await rig.start_runner("b")
            dispatcher = rig.make_dispatcher()
            await down.stop(drain=False)
            await dispatcher.start()
            op_id = await rig.submit()
            record = await rig.terminal(op_id)
            assert record.state is OpState.SUCCEEDED and record.runner == "b"
            assert record.attempt_count == 1
            assert rig.starts_on(up.incarnation_id) == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C6", "C8")
def test_bound_operation_is_never_moved_to_another_runner(tmp_path: Path) -> None:
    """C6/C8: a possibly-delivered operation stays bound; RECONCILE_DEADLINE, nothing elsewhere."""

    async def scenario() -> None:
        faults = FaultInterceptor()
        silent = (
            "GetOperationStatus",
            "BatchGetOperationStatus",
            "GetRunnerInfo",
            "WatchOperations",
        )
        faults.faults.append(
            Fault("Dispatch", DROP_RESPONSE, on_fire=lambda: faults.block(*silent))
        )
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            first = await rig.start_runner("a")
            other = await rig.start_runner("b")
            short = dataclasses.replace(TIMINGS, reconcile_deadline=1.0)
            dispatcher = rig.make_dispatcher(timings=short)
            await dispatcher.start()
            op_id = await rig.submit({"sleep_ms": "5000"})
            await rig.wait_for(op_id, lambda r: r.state is OpState.DISPATCH_UNKNOWN)
            await first.stop(drain=False)  # a is gone for good
            faults.unblock()
            record = await rig.terminal(op_id)
            assert record.runner == "a"
            assert record.state is OpState.TIMED_OUT
            assert record.error_reason == "RECONCILE_DEADLINE"
            assert record.execution is Execution.UNKNOWN
            assert rig.starts_on(other.incarnation_id) == 0
            assert dispatcher.metrics.rpc_calls["Dispatch"] == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C6")
def test_runner_avoided_after_lost_preflights_is_used_again_once_it_answers(
    tmp_path: Path,
) -> None:
    """C6 routing: regression: a runner avoided after 3 lost preflights stayed avoided
    forever, since no new turn was routed there to clear it; its watch stream now does."""

    async def scenario() -> None:
        faults = FaultInterceptor(
            *(Fault("GetOperationStatus", DROP_REQUEST, nth=n) for n in (1, 2, 3))
        )
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            first = await rig.start_runner("a")  # first by name: the router's first choice
            await rig.start_runner("b")
            # C2a off: the first attempt asks first, so the lost preflights happen.
            dispatcher = rig.make_dispatcher(preflight_first_attempts=True)
            await dispatcher.start()
            # Both watch streams have opened (their first message clears any streak)
            # before the preflights are lost: only a later message may clear it.
            for _ in range(200):  # bounded: 10 s
                if all(map(dispatcher.room.scheduler.heard_from, ("a", "b"))):
                    break
                await asyncio.sleep(0.05)
            op_id = await rig.submit()
            record = await rig.terminal(op_id)
            assert record.state is OpState.SUCCEEDED and record.runner == "b"
            await asyncio.sleep(3.0)  # > the runner's 2 s watch heartbeat
            later = await rig.terminal(await rig.submit())
            assert later.runner == "a"
            assert rig.starts_on(first.incarnation_id) == 1
        finally:
            await rig.close()

    asyncio.run(scenario())
