"""Several executors per runner (R14), streamed output (R13), heartbeats (R12) and
declared effects (R7), over a real runner: real SQLite store, real gRPC server
on 127.0.0.1, the executors of tests/executor/functions.py as a user serves them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from tests.runner.live import Live, dispatch_request, envelope, live_runner
from turnwire.common.v1 import turn_pb2
from turnwire.errors import error_info
from turnwire.output_stream import StreamLimits
from turnwire.runner.v1 import runner_pb2

R = runner_pb2
FUNCTIONS = "python:tests.executor.functions"
EXECUTORS = (
    f"words={FUNCTIONS}:stream_words",
    f"blocks={FUNCTIONS}:stream_blocks",
    f"silent={FUNCTIONS}:go_silent",
    f"fails={FUNCTIONS}:fail_as_asked",
    f"counter={FUNCTIONS}:Counter",
    f"sleeper={FUNCTIONS}:sleep_async",
    f"waiter={FUNCTIONS}:wait_for_cancel",
)


@contextlib.asynccontextmanager
async def runner(tmp_path: Path, **config: object) -> AsyncIterator[Live]:
    async with live_runner(tmp_path / "r.db", executors=EXECUTORS, **config) as live:
        yield live


async def dispatch(live: Live, op: str, **knobs: object) -> runner_pb2.DispatchResponse:
    body = envelope(op, **knobs)  # type: ignore[arg-type]
    return await live.stub.Dispatch(dispatch_request(op, body, live.incarnation))


def chunks(messages: list[runner_pb2.StreamOutputResponse]) -> list[tuple[int, bytes]]:
    return [(m.chunk.offset, m.chunk.data) for m in messages if m.WhichOneof("item") == "chunk"]


@pytest.mark.rule("R14")
def test_runner_info_lists_its_executors_and_an_unserved_one_is_refused_definitely(
    tmp_path: Path,
) -> None:
    """R14: GetRunnerInfo names every executor served (kind, never the spec); a
    Dispatch naming another is FAILED_PRECONDITION / EXECUTOR_NOT_SERVED, and
    nothing was written: the same id is later admitted for a served executor."""

    async def main() -> None:
        async with runner(tmp_path) as live:
            info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
            assert [(e.name, e.kind) for e in info.executors] == [
                ("blocks", "python"),
                ("counter", "python"),
                ("default", "echo"),
                ("fails", "python"),
                ("silent", "python"),
                ("sleeper", "python"),
                ("waiter", "python"),
                ("words", "python"),
            ]
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await dispatch(live, "op_x", executor="translator")
            assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
            info_ = error_info(refused.value)
            assert info_ is not None and info_.reason == "EXECUTOR_NOT_SERVED"
            assert info_.metadata["executor"] == "translator"
            assert (
                info_.metadata["served"]
                == "blocks,counter,default,fails,silent,sleeper,waiter,words"
            )
            assert info_.metadata["incarnation_id"] == live.incarnation
            assert not (await live.status("op_x")).present  # no row, no tombstone
            admitted = await dispatch(live, "op_x", executor="counter")
            assert not admitted.duplicate
            settled = await live.wait_settled("op_x")
            assert settled.result.output == b"call 1 for op_x"

    asyncio.run(main())


@pytest.mark.rule("R14")
def test_a_runner_with_named_executors_only_refuses_a_turn_naming_none(tmp_path: Path) -> None:
    """R14: no bare --executor, no default: a turn naming none is refused, never run."""

    async def main() -> None:
        async with runner(tmp_path, executor=None) as live:
            info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
            assert "default" not in [e.name for e in info.executors]
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await dispatch(live, "op_plain")
            info_ = error_info(refused.value)
            assert info_ is not None and info_.reason == "EXECUTOR_NOT_SERVED"

    asyncio.run(main())


@pytest.mark.rule("R13")
def test_stream_output_from_zero_and_from_the_middle_then_the_end(tmp_path: Path) -> None:
    """R13: every chunk after the offset, in order, then one end with the final
    offset and the settled row, which records output_chunks."""

    async def main() -> None:
        async with runner(tmp_path) as live:
            await dispatch(live, "op_w", executor="words", items=("one two three four",))
            whole = await live.stream("op_w")
            assert chunks(whole) == [(1, b"one "), (2, b"two "), (3, b"three "), (4, b"four ")]
            end = whole[-1].end
            assert whole[-1].WhichOneof("item") == "end" and end.final_offset == 4
            assert end.operation.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            assert end.operation.output_chunks == 4
            assert end.operation.result.output == b"one two three four"
            assert all(m.incarnation_id == live.incarnation for m in whole)
            resumed = await live.stream("op_w", after_offset=2)
            assert chunks(resumed) == [(3, b"three "), (4, b"four ")]
            assert resumed[-1].end.final_offset == 4
            assert (await live.status("op_w")).operation.output_chunks == 4

    asyncio.run(main())


@pytest.mark.rule("R13")
def test_a_reader_behind_the_buffer_is_told_the_gap_never_a_silent_hole(tmp_path: Path) -> None:
    """R13: past the per-operation buffer the oldest chunks are dropped; a reader from
    offset 0 first gets a gap naming the first chunk still held; once the stream is
    forgotten the settled row still says how many chunks there were."""
    limits = StreamLimits(max_chunk_bytes=1000, turn_budget_bytes=100_000, stream_buffer_bytes=3000)

    async def main() -> None:
        async with runner(tmp_path, stream_limits=limits, stream_keep_seconds=0.5) as live:
            await dispatch(
                live, "op_b", executor="blocks", parameters={"count": "10", "size": "1000"}
            )
            await live.wait_settled("op_b")
            held = await live.stream("op_b")
            assert held[0].WhichOneof("item") == "gap"
            assert (held[0].gap.after_offset, held[0].gap.next_offset) == (0, 8)
            assert [offset for offset, _ in chunks(held)] == [8, 9, 10]
            assert held[-1].end.final_offset == 10
            for _ in range(100):  # kept 0.5 s after settlement, then forgotten (bounded 5 s)
                if not live.runner.service.output.held("op_b"):
                    break
                await asyncio.sleep(0.05)
            forgotten = await live.stream("op_b", after_offset=4)
            assert [m.WhichOneof("item") for m in forgotten] == ["gap", "end"]
            assert (forgotten[0].gap.after_offset, forgotten[0].gap.next_offset) == (4, 11)
            assert forgotten[1].end.final_offset == 10
            caught_up = await live.stream("op_b", after_offset=10)
            assert [m.WhichOneof("item") for m in caught_up] == ["end"]

    asyncio.run(main())


@pytest.mark.rule("R13")
def test_a_slow_reader_blocks_neither_the_executor_nor_another_reader(tmp_path: Path) -> None:
    """R13: a reader that stops reading (its HTTP/2 window fills) holds up nothing:
    the turn settles and a second reader gets every chunk live, in order; the slow
    one resumes where it stopped."""
    count, size = 200, 8000  # 1.6 MB: far past a stalled reader's flow-control window
    # A buffer that holds it all, so the stalled reader loses nothing (no gap).
    limits = StreamLimits(stream_buffer_bytes=4 << 20, total_buffer_bytes=8 << 20)

    async def main() -> None:
        async with runner(tmp_path, stream_limits=limits) as live:
            await dispatch(
                live,
                "op_s",
                executor="blocks",
                parameters={"count": str(count), "size": str(size)},
            )
            stalled = live.stub.StreamOutput(R.StreamOutputRequest(operation_id="op_s"))
            first = await stalled.read()  # then it reads nothing more for a while
            assert first.chunk.offset == 1
            fast = await live.stream("op_s")
            assert [offset for offset, _ in chunks(fast)] == list(range(1, count + 1))
            settled = await live.wait_settled("op_s")
            assert settled.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            assert settled.output_chunks == count
            rest = [message async for message in stalled]
            assert [offset for offset, _ in chunks(rest)] == list(range(2, count + 1))
            assert rest[-1].end.final_offset == count

    asyncio.run(main())


@pytest.mark.rule("R12")
def test_an_executor_that_stops_heartbeating_ends_timed_out_started(tmp_path: Path) -> None:
    """R12: silence past the turn's heartbeat timeout: the runner stops it; TIMED_OUT,
    HEARTBEAT_TIMEOUT, stop reason HEARTBEAT, execution STARTED."""

    async def main() -> None:
        async with runner(tmp_path) as live:
            await dispatch(live, "op_h", executor="silent", heartbeat_ms=300)
            settled = await live.wait_settled("op_h")
            assert settled.state == R.RUNNER_OPERATION_STATE_TIMED_OUT
            assert settled.stop_reason == turn_pb2.STOP_REASON_HEARTBEAT
            assert settled.execution == turn_pb2.EXECUTION_STARTED
            assert settled.error.reason == "HEARTBEAT_TIMEOUT"

    asyncio.run(main())


@pytest.mark.rule("R7")
@pytest.mark.parametrize(
    ("how", "effect", "retry_after_ms"),
    [
        ("no_effect", turn_pb2.DECLARED_EFFECT_NONE, 1500),
        ("after_effect", turn_pb2.DECLARED_EFFECT_APPLIED, 0),
        ("plain", turn_pb2.DECLARED_EFFECT_UNSPECIFIED, 0),
    ],
)
def test_the_declared_effect_is_on_the_settled_row(
    tmp_path: Path, how: str, effect: int, retry_after_ms: int
) -> None:
    """R7: the settled row carries what the executor declared (TurnError.effect,
    retry_after), durably: a restarted runner reports the same."""

    async def main() -> None:
        store = tmp_path / "r.db"
        async with live_runner(store, executors=EXECUTORS) as live:
            await dispatch(live, "op_e", executor="fails", parameters={"how": how})
            settled = await live.wait_settled("op_e")
        async with live_runner(store, executors=EXECUTORS) as again:
            reread = (await again.status("op_e")).operation
        for row in (settled, reread):
            assert row.state == R.RUNNER_OPERATION_STATE_FAILED
            assert row.error.reason == "EXECUTOR_FAILED"
            assert row.error.effect == effect
            assert row.error.retry_after.ToMilliseconds() == retry_after_ms

    asyncio.run(main())


@pytest.mark.rule("R6")
@pytest.mark.parametrize("executor", ["sleeper", "waiter"])
def test_a_cancel_stops_an_async_and_a_plain_function(tmp_path: Path, executor: str) -> None:
    """R6: a Cancel reaches the function (an async one's task is cancelled; a plain
    one sees ctx.cancelled): CANCELLED, execution STARTED, slot freed after."""

    async def main() -> None:
        async with runner(tmp_path) as live:
            await dispatch(live, "op_c", executor=executor, parameters={"seconds": "30"})
            await live.wait_state("op_c", lambda op: op.state == R.RUNNER_OPERATION_STATE_RUNNING)
            await live.cancel("op_c")
            settled = await live.wait_settled("op_c")
            assert settled.state == R.RUNNER_OPERATION_STATE_CANCELLED
            assert settled.execution == turn_pb2.EXECUTION_STARTED
            assert settled.stop_reason == turn_pb2.STOP_REASON_CANCEL

    asyncio.run(main())


def test_stream_output_for_an_unknown_operation_is_not_found(tmp_path: Path) -> None:
    async def main() -> None:
        async with runner(tmp_path) as live:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await live.stream("op_nobody")
            assert refused.value.code() is grpc.StatusCode.NOT_FOUND
            info = error_info(refused.value)
            assert info is not None and info.reason == "OPERATION_NOT_FOUND"

    asyncio.run(main())
