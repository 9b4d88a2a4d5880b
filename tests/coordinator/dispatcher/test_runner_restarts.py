"""Runner restarts and unreachable runners, against real runners (C8, C9, §6)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.model import Execution, OpState
from coordinator_svc.storage import FakeJournal
from tests.support import runner_access
from tests.support.fault_interceptor import DROP_RESPONSE, Fault, FaultInterceptor
from tests.support.runner_process import runner_process
from turnwire.testing.dispatcher_rig import TIMINGS, Rig
from turnwire.testing.processes import ServiceProcess

STATUS_AND_WATCH = (
    "GetOperationStatus",
    "BatchGetOperationStatus",
    "GetRunnerInfo",
    "WatchOperations",
)


def blind_after_dispatch() -> FaultInterceptor:
    """Lose the Dispatch reply, then hear nothing from the runner until unblocked."""
    faults = FaultInterceptor()
    faults.faults.append(
        Fault("Dispatch", DROP_RESPONSE, on_fire=lambda: faults.block(*STATUS_AND_WATCH))
    )
    return faults


@pytest.mark.rule("C8")
def test_runner_restart_during_ambiguity_times_out_incarnation_changed(tmp_path: Path) -> None:
    """C8: runner restart during ambiguity: INCARNATION_CHANGED, nothing on the new incarnation."""

    async def scenario() -> None:
        faults = blind_after_dispatch()
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            old = await rig.start_runner("r1")
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            op_id = await rig.submit()
            await rig.wait_for(op_id, lambda r: r.state is OpState.DISPATCH_UNKNOWN)
            for _ in range(200):  # let the lost Dispatch finish executing on the old runner
                if rig.starts()[op_id]:
                    break
                await asyncio.sleep(0.02)
            await old.stop(drain=True)
            new = await rig.start_runner("r1", store="r1-replacement", listen=old.address)
            faults.unblock()
            record = await rig.terminal(op_id)
            assert record.state is OpState.TIMED_OUT
            assert record.error_reason == "INCARNATION_CHANGED"
            assert record.execution is Execution.UNKNOWN
            assert rig.starts_on(new.incarnation_id) == 0
            assert rig.starts_on(old.incarnation_id) == 1
            assert dispatcher.metrics.rpc_calls["Dispatch"] == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


def test_runner_restart_on_the_same_durable_store_adopts_the_result(tmp_path: Path) -> None:
    """§6: same store_id and durable: the finished result is adopted, not re-run."""

    async def scenario() -> None:
        faults = blind_after_dispatch()
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            old = await rig.start_runner("r1")
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            op_id = await rig.submit({"output": "kept"})
            await rig.wait_for(op_id, lambda r: r.state is OpState.DISPATCH_UNKNOWN)
            for _ in range(200):
                row = await rig.runner_row("r1", op_id)
                if row.present and row.operation.settled_at.seconds:
                    break
                await asyncio.sleep(0.02)
            await old.stop(drain=True)
            new = await rig.start_runner("r1", listen=old.address)
            assert new.store_id == old.store_id
            faults.unblock()
            record = await rig.terminal(op_id)
            assert record.state is OpState.SUCCEEDED
            assert record.execution is Execution.STARTED
            assert record.incarnation_id == new.incarnation_id
            assert rig.starts()[op_id] == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C8")
def test_unreachable_runner_ends_at_the_reconcile_deadline(tmp_path: Path) -> None:
    """C8: the bound runner stays unreachable: back off, then TIMED_OUT RECONCILE_DEADLINE."""

    async def scenario() -> None:
        faults = FaultInterceptor()
        # Unreachable for Cancel too: the give-up Cancel (C14) would otherwise find
        # the finished row and adopt it.
        faults.faults.append(
            Fault(
                "Dispatch",
                DROP_RESPONSE,
                on_fire=lambda: faults.block(*STATUS_AND_WATCH, "Cancel"),
            )
        )
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            await rig.start_runner("r1")
            short = dataclasses.replace(TIMINGS, reconcile_deadline=0.5)
            dispatcher = rig.make_dispatcher(timings=short)
            await dispatcher.start()
            op_id = await rig.submit()
            record = await rig.terminal(op_id)
            assert record.state is OpState.TIMED_OUT
            assert record.error_reason == "RECONCILE_DEADLINE"
            assert record.execution is Execution.UNKNOWN
            assert dispatcher.metrics.rpc_calls["Dispatch"] == 1
            assert dispatcher.metrics.rpc_calls["Cancel"] == 1  # the one tombstone try
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C9")
def test_running_operation_on_a_restarted_runner_times_out(tmp_path: Path) -> None:
    """C9: a running operation's runner restarts unseen: TIMED_OUT INCARNATION_CHANGED."""

    async def scenario() -> None:
        faults = FaultInterceptor()
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            old = await rig.start_runner("r1")
            dispatcher = rig.make_dispatcher(status_poll=60.0)  # the watch must find it
            await dispatcher.start()
            op_id = await rig.submit({"sleep_ms": "30000"})
            await rig.wait_for(op_id, lambda r: r.state is OpState.RUNNING)
            faults.block(*STATUS_AND_WATCH)  # the old runner's last words are lost
            await old.stop(drain=False)
            new = await rig.start_runner("r1", store="r1-replacement", listen=old.address)
            faults.unblock()
            record = await rig.terminal(op_id)
            assert record.state is OpState.TIMED_OUT
            assert record.error_reason == "INCARNATION_CHANGED"
            assert record.execution is Execution.STARTED  # the start was confirmed (R3)
            assert rig.starts_on(new.incarnation_id) == 0
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("R3")
def test_killed_runner_on_the_same_durable_store_reports_interrupted(tmp_path: Path) -> None:
    """§6/R3: runner SIGKILLed mid-turn, same durable store: TIMED_OUT INTERRUPTED, STARTED."""

    async def scenario() -> None:
        # The runner processes demand the session's secret (tests/support/runner_access.py).
        rig = Rig(tmp_path, FakeJournal(), secret=runner_access.SECRET)
        store = tmp_path / "r1.db"
        first = runner_process(store, tmp_path, executor="metered", ledger_path=rig.ledger)
        second: ServiceProcess | None = None
        try:
            dispatcher = rig.make_dispatcher(
                extra=[RunnerEndpoint("r1", first.address)], status_poll=60.0
            )
            await dispatcher.start()
            op_id = await rig.submit({"sleep_ms": "60000"})
            await rig.wait_for(op_id, lambda r: r.state is OpState.RUNNING)
            for _ in range(250):  # until the runner has confirmed the start
                if rig.starts()[op_id]:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)
            first.kill()
            first.wait(10)
            second = runner_process(
                store,
                tmp_path,
                executor="metered",
                ledger_path=rig.ledger,
                extra_args=["--listen", first.address],
                name="runner-again",
            )
            record = await rig.terminal(op_id, within=30)
            assert record.state is OpState.TIMED_OUT
            assert record.error_reason == "INTERRUPTED"
            assert record.execution is Execution.STARTED
            assert rig.starts()[op_id] == 1
        finally:
            await rig.close()
            first.kill()
            if second is not None:
                second.kill()

    asyncio.run(scenario())
