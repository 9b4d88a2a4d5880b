"""GetRunnerInfo reports the receive limit (turnwire.limits); a settled row's stop
reason is the one that stopped the turn (R6, R8), over a real server and channel."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from tests.runner.gated_executor import GatedExecutor
from tests.runner.live import dispatch_request, envelope, live_runner
from turnwire.common.v1 import turn_pb2
from turnwire.limits import DEFAULT_RUNNER_MAX_RECEIVE_BYTES
from turnwire.runner.v1 import runner_pb2

R = runner_pb2


def test_runner_info_reports_its_receive_limit(tmp_path: Path) -> None:
    """The limit the coordinator sizes every Dispatch by, as this runner enforces it."""

    async def main() -> None:
        async with live_runner(tmp_path / "a.db") as live:
            info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
            assert info.max_receive_message_bytes == DEFAULT_RUNNER_MAX_RECEIVE_BYTES
        async with live_runner(tmp_path / "b.db", max_receive_bytes=128 * 1024) as live:
            info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
            assert info.max_receive_message_bytes == 128 * 1024
            body = envelope("op_big", output="x" * (200 * 1024))
            request = dispatch_request("op_big", body, live.incarnation)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await live.stub.Dispatch(request)
            assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert not (await live.status("op_big")).present  # no handler ever saw it

    asyncio.run(main())


@pytest.mark.rule("R6", "R8")
def test_turn_that_finished_during_a_drain_reports_no_shutdown(tmp_path: Path) -> None:
    """R6/R8: the drain records SHUTDOWN; the turn finishes on its own: SUCCEEDED, and
    its settled row has no stop reason (SHUTDOWN stopped nothing)."""
    gated = GatedExecutor(finish_at_once=False)

    async def main() -> None:
        async with live_runner(tmp_path / "r.db", executor_override=gated) as live:
            await live.dispatch("op_drain")
            await live.wait_state(
                "op_drain", lambda op: op.state == R.RUNNER_OPERATION_STATE_RUNNING
            )
            stopping = asyncio.ensure_future(live.runner.stop())
            stopped = await live.wait_state(
                "op_drain", lambda op: op.stop_reason == turn_pb2.STOP_REASON_SHUTDOWN
            )
            assert stopped.state == R.RUNNER_OPERATION_STATE_RUNNING
            gated.handles["op_drain"].finish.set()  # it finishes on its own
            await asyncio.wait_for(stopping, 10)
        # Read the settled row once the drain is over: a status call racing the stopping
        # server could be cancelled by it. The next incarnation reports the row as the
        # drain left it (R9: kept until released).
        async with live_runner(tmp_path / "r.db") as again:
            done = (await again.status("op_drain")).operation
        assert done.HasField("settled_at")
        assert done.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
        assert done.stop_reason == turn_pb2.STOP_REASON_UNSPECIFIED

    asyncio.run(main())


@pytest.mark.rule("R6", "C11")
def test_cancel_that_lost_the_race_leaves_no_stop_reason(tmp_path: Path) -> None:
    """R6/C11: cancel asked, the executor finished successfully anyway: no stop reason."""
    gated = GatedExecutor(finish_at_once=False, finish_on_cancel=False)

    async def main() -> None:
        async with live_runner(tmp_path / "r.db", executor_override=gated) as live:
            await live.dispatch("op_race")
            await live.wait_state(
                "op_race", lambda op: op.state == R.RUNNER_OPERATION_STATE_RUNNING
            )
            reply = await live.cancel("op_race")
            assert reply.operation.stop_reason == turn_pb2.STOP_REASON_CANCEL  # asked (R6)
            gated.handles["op_race"].finish.set()
            done = await live.wait_settled("op_race")
            assert done.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            assert done.stop_reason == turn_pb2.STOP_REASON_UNSPECIFIED
            again = await live.cancel("op_race")  # a cancel after the end changes nothing
            assert again.operation.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            assert again.operation.stop_reason == turn_pb2.STOP_REASON_UNSPECIFIED

    asyncio.run(main())
