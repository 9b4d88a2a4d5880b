"""Cancel (C11) and tracking (C9) through the dispatcher, with real runners
(and the fake gateway scripted for a contract violation a real runner never shows)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coordinator_svc.core.model import Execution, OpState, StopReason
from coordinator_svc.storage import FakeJournal
from tests.support.fault_interceptor import DROP_REQUEST, Fault, FaultInterceptor
from turnwire.runner.v1 import runner_pb2
from turnwire.testing.dispatcher_rig import Rig, sqlite_journal
from turnwire.testing.runner_gateway import InProcessRunner


@pytest.mark.rule("C9")
def test_acknowledged_operation_that_disappears_is_a_protocol_error(tmp_path: Path) -> None:
    """C9: acknowledged, then absent on the same incarnation: PROTOCOL_ERROR (DISAPPEARED),
    its execution what the runner last reported (STARTED: the ledger shows its one start)."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            running = await rig.start_runner()
            gateway = InProcessRunner("r1", running.service)
            dispatcher = rig.make_dispatcher(gateways={"r1": gateway}, status_poll=0.2)
            await dispatcher.start()
            op_id = await rig.submit({"sleep_ms": "30000"})  # still running when forgotten
            await rig.wait_for(op_id, lambda r: r.state is OpState.RUNNING)
            gateway.forget(op_id)  # the runner forgets what it acknowledged
            record = await rig.terminal(op_id)
            assert record.state is OpState.PROTOCOL_ERROR
            assert record.error_reason == "ACKNOWLEDGED_OPERATION_DISAPPEARED"
            assert record.execution is Execution.STARTED
            assert gateway.dispatches == 1 and rig.starts()[op_id] == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C11", "C14")
def test_cancel_before_dispatch_is_cancelled_not_started(tmp_path: Path) -> None:
    """C11/C14: cancelled while QUEUED: CANCELLED NOT_STARTED at once; nothing is ever sent."""

    async def scenario() -> None:
        rig = Rig(tmp_path, sqlite_journal(tmp_path / "journal.db"))
        try:
            await rig.start_runner()
            dispatcher = rig.make_dispatcher()
            op_id = await rig.submit()  # not started yet: nothing routes it
            queued = await rig.journal.get(op_id)
            assert queued is not None
            stored = await dispatcher.request_cancel(queued)
            assert stored.state is OpState.CANCELLED
            assert stored.execution is Execution.NOT_STARTED
            assert stored.cancel_requested and stored.stop_reason is StopReason.CANCEL
            again = await dispatcher.request_cancel(stored)
            assert again == stored  # the first stop reason wins, stored once
            await dispatcher.start()
            await asyncio.sleep(0.2)  # a few due scans pass over it
            assert dispatcher.metrics.rpc_calls["Dispatch"] == 0
            row = await rig.runner_row("r1", op_id)
            assert not row.present
            assert rig.starts()[op_id] == 0
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C11")
def test_cancel_while_running_lets_the_runner_settle_it(tmp_path: Path) -> None:
    """C11: after dispatch a Cancel is sent; the runner's settlement decides: CANCELLED, STARTED."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.start_runner()
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            op_id = await rig.submit({"sleep_ms": "20000"})
            running = await rig.wait_for(op_id, lambda r: r.state is OpState.RUNNING)
            for _ in range(200):  # wait until the runner confirmed the start
                if rig.starts()[op_id]:
                    break
                await asyncio.sleep(0.02)
            stored = await dispatcher.request_cancel(running)
            assert stored.state is OpState.CANCELLING and stored.cancel_requested
            record = await rig.terminal(op_id)
            assert record.state is OpState.CANCELLED
            assert record.execution is Execution.STARTED
            assert rig.starts()[op_id] == 1
            row = await rig.runner_row("r1", op_id)
            assert row.operation.state == runner_pb2.RUNNER_OPERATION_STATE_CANCELLED
        finally:
            await rig.close()

    asyncio.run(scenario())


_AGREES = {
    OpState.SUCCEEDED: {runner_pb2.RUNNER_OPERATION_STATE_SUCCEEDED},
    OpState.CANCELLED: {
        runner_pb2.RUNNER_OPERATION_STATE_CANCELLED,
        runner_pb2.RUNNER_OPERATION_STATE_TOMBSTONED,
    },
}


@pytest.mark.rule("C11", "C10", "C14")
def test_cancel_racing_completion_gives_one_consistent_answer(tmp_path: Path) -> None:
    """C11/C10/C14: cancel vs completion: journal, runner row and ledger tell one story."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.start_runner()
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            for delay_ms in (0, 1, 3, 10, 30):
                op_id = await rig.submit({"sleep_ms": "10"})
                await asyncio.sleep(delay_ms / 1000)
                current = await rig.journal.get(op_id)
                assert current is not None
                stored = await dispatcher.request_cancel(current)
                record = await rig.terminal(op_id)
                assert record.state in _AGREES, record
                # The cancel is visible unless the turn had already ended.
                assert record.cancel_requested or stored.state is OpState.SUCCEEDED
                starts = rig.starts()[op_id]
                assert starts <= 1
                assert (record.execution is Execution.STARTED) == (starts == 1) or (
                    record.execution is Execution.UNKNOWN
                )
                row = await rig.runner_row("r1", op_id)
                if record.execution is Execution.NOT_STARTED and not row.present:
                    assert starts == 0  # cancelled while QUEUED: nothing was sent
                    continue
                assert row.operation.state in _AGREES[record.state]
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C11")
def test_lost_cancel_is_resent_after_its_backoff_not_the_status_poll(tmp_path: Path) -> None:
    """C11: regression: a lost Cancel waited a whole status poll (10 s) before it was resent."""

    async def scenario() -> None:
        faults = FaultInterceptor(Fault("Cancel", DROP_REQUEST, nth=1))
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            await rig.start_runner()
            dispatcher = rig.make_dispatcher(status_poll=30.0)
            await dispatcher.start()
            op_id = await rig.submit({"sleep_ms": "6000"})
            running = await rig.wait_for(op_id, lambda r: r.state is OpState.RUNNING)
            for _ in range(200):  # wait until the runner confirmed the start
                if rig.starts()[op_id]:
                    break
                await asyncio.sleep(0.02)
            await dispatcher.request_cancel(running)
            # Well before the turn would finish (6 s) and the status poll (30 s).
            record = await rig.terminal(op_id, within=4.0)
            assert record.state is OpState.CANCELLED
            assert faults.calls["Cancel"] >= 2
        finally:
            await rig.close()

    asyncio.run(scenario())
