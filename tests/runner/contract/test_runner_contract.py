"""RunnerService over a real grpc.aio server and channel: replies, codes and reasons."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from runner_svc.executors import ExecutionOutcome
from runner_svc.service import ServiceSettings
from tests.runner.gated_executor import GatedExecutor
from tests.runner.live import (
    READ_ONLY,
    WRITABLE,
    Live,
    dispatch_request,
    envelope,
    live_runner,
    settled,
    stamp_now,
)
from turnwire.common.v1 import turn_pb2
from turnwire.errors import error_info
from turnwire.ids import is_incarnation_id, sha256_hex
from turnwire.runner.v1 import runner_pb2

R = runner_pb2


async def refused(call: Awaitable[object]) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    typed = error_info(caught.value)
    assert typed is not None, caught.value
    return typed.code, typed.reason, typed.metadata


def run(tmp_path: Path, scenario: Callable[[Live], Awaitable[None]], **config: object) -> None:
    async def main() -> None:
        async with live_runner(tmp_path / "runner.db", **config) as live:  # type: ignore[arg-type]
            await scenario(live)

    asyncio.run(main())


@pytest.mark.rule("R1")
def test_status_of_unknown_id_carries_incarnation_and_store(tmp_path: Path) -> None:
    """R1: even "not found" names the incarnation; durable store id and flag come along."""

    async def scenario(live: Live) -> None:
        reply = await live.status("op_unknown")
        assert not reply.present
        assert is_incarnation_id(reply.incarnation_id) and reply.incarnation_id == live.incarnation
        assert reply.durable and reply.store_id == live.runner.store_id

    run(tmp_path, scenario)


@pytest.mark.rule("R2", "R3")
def test_dispatch_runs_once_and_reports_success(tmp_path: Path) -> None:
    """R2/R3: accepted reply (the row with its launch intent: the turn launches at once,
    R4), then SUCCEEDED with the executor's output, execution STARTED."""

    async def scenario(live: Live) -> None:
        reply = await live.dispatch("op_ok", output="hello")
        assert reply.incarnation_id == live.incarnation and not reply.duplicate
        assert reply.operation.state == R.RUNNER_OPERATION_STATE_LAUNCHING
        done = await live.wait_settled("op_ok")
        assert done.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
        assert done.execution == turn_pb2.EXECUTION_STARTED
        assert done.result.output == b"hello" and done.incarnation_id == live.incarnation

    run(tmp_path, scenario)


@pytest.mark.rule("R7")
def test_failing_executor_settles_failed(tmp_path: Path) -> None:
    """R7: an executor failure settles FAILED with its reason, execution STARTED."""

    async def scenario(live: Live) -> None:
        await live.dispatch("op_fail", fail=True)
        done = await live.wait_settled("op_fail")
        assert done.state == R.RUNNER_OPERATION_STATE_FAILED
        assert done.error.reason == "EXECUTOR_FAILED"
        assert done.execution == turn_pb2.EXECUTION_STARTED

    run(tmp_path, scenario)


@pytest.mark.rule("R7")
def test_invalid_outcome_settles_result_invalid(tmp_path: Path) -> None:
    """R7: an outcome that fails validation settles FAILED with RESULT_INVALID."""

    async def scenario(live: Live) -> None:
        await live.dispatch("op_bad")
        done = await live.wait_settled("op_bad")
        assert done.state == R.RUNNER_OPERATION_STATE_FAILED
        assert done.error.reason == "RESULT_INVALID"

    bad = GatedExecutor(outcome=ExecutionOutcome(succeeded=True, output="not bytes"))  # type: ignore[arg-type]
    run(tmp_path, scenario, executor_override=bad)


@pytest.mark.rule("C5", "R2")
@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda r: r.__setattr__("envelope_digest", "0" * 64), "ENVELOPE_INVALID"),
        (lambda r: r.__setattr__("operation_id", "op_other"), "ENVELOPE_INVALID"),
        (lambda r: r.__setattr__("expected_incarnation_id", "f" * 32), "INCARNATION_MISMATCH"),
    ],
    ids=["digest", "id-mismatch", "incarnation"],
)
def test_bad_dispatch_is_refused_typed_and_changes_nothing(
    tmp_path: Path, mutate: Callable[[R.DispatchRequest], None], reason: str
) -> None:
    """C5/R2: a refused Dispatch is typed, names the incarnation, and writes no row."""
    codes = {
        "ENVELOPE_INVALID": grpc.StatusCode.INVALID_ARGUMENT,
        "INCARNATION_MISMATCH": grpc.StatusCode.FAILED_PRECONDITION,
    }

    async def scenario(live: Live) -> None:
        request = dispatch_request("op_x", envelope("op_x"), live.incarnation)
        mutate(request)
        code, got, metadata = await refused(live.stub.Dispatch(request))
        assert (code, got) == (codes[reason], reason)
        assert metadata["incarnation_id"] == live.incarnation
        assert not (await live.status("op_x")).present
        assert not (await live.status("op_other")).present

    run(tmp_path, scenario)


def test_unparseable_envelope_is_invalid(tmp_path: Path) -> None:
    """Bad input: bytes that hash right but do not parse are ENVELOPE_INVALID."""

    async def scenario(live: Live) -> None:
        body = b"\xff\xff\xff"
        request = R.DispatchRequest(
            operation_id="op_x",
            envelope=body,
            envelope_digest=sha256_hex(body),
            expected_incarnation_id=live.incarnation,
            fencing_token=1,
            attempt=1,
            dispatch_stamp=stamp_now(),
        )
        code, reason, _ = await refused(live.stub.Dispatch(request))
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ENVELOPE_INVALID")

    run(tmp_path, scenario)


@pytest.mark.rule("R2")
def test_known_id_with_other_digest_is_envelope_mismatch(tmp_path: Path) -> None:
    """R2: a known id with a different envelope digest is ENVELOPE_MISMATCH (ALREADY_EXISTS)."""

    async def scenario(live: Live) -> None:
        await live.dispatch("op_m", output="one")
        code, reason, metadata = await refused(live.dispatch("op_m", output="two"))
        assert (code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "ENVELOPE_MISMATCH")
        assert metadata["operation_id"] == "op_m"

    run(tmp_path, scenario)


def test_stale_fencing_token_is_refused(tmp_path: Path) -> None:
    """§5: Dispatch and Cancel with a token lower than the highest seen are refused."""

    async def scenario(live: Live) -> None:
        await live.dispatch("op_f", token=5)
        await live.wait_settled("op_f")
        code, reason, _ = await refused(live.dispatch("op_f", token=4))
        assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "STALE_FENCING_TOKEN")
        code, reason, _ = await refused(live.cancel("op_f", token=4))
        assert reason == "STALE_FENCING_TOKEN"
        again = await live.dispatch("op_f", token=7)
        assert again.duplicate and again.operation.fencing_token == 7
        code, reason, _ = await refused(live.dispatch("op_f", token=6))
        assert reason == "STALE_FENCING_TOKEN"

    run(tmp_path, scenario)


@pytest.mark.rule("R5")
def test_tombstone_refuses_a_later_dispatch(tmp_path: Path) -> None:
    """R5: Cancel of an unknown id tombstones it; a later Dispatch is CANCELLED_BEFORE_DISPATCH."""

    async def scenario(live: Live) -> None:
        cancel = await live.cancel("op_t")
        assert cancel.tombstoned and cancel.incarnation_id == live.incarnation
        assert cancel.operation.state == R.RUNNER_OPERATION_STATE_TOMBSTONED
        assert cancel.operation.execution == turn_pb2.EXECUTION_NOT_STARTED
        code, reason, _ = await refused(live.dispatch("op_t"))
        assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "CANCELLED_BEFORE_DISPATCH")

    gated = GatedExecutor()
    run(tmp_path, scenario, executor_override=gated)
    assert gated.starts == []


@pytest.mark.rule("C8a")
def test_cancel_with_wrong_incarnation_is_refused(tmp_path: Path) -> None:
    """C8a: Cancel bound to another incarnation is refused and leaves no tombstone."""

    async def scenario(live: Live) -> None:
        request = R.CancelRequest(operation_id="op_c", expected_incarnation_id="e" * 32)
        code, reason, metadata = await refused(live.stub.Cancel(request))
        assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "INCARNATION_MISMATCH")
        assert metadata["incarnation_id"] == live.incarnation
        assert not (await live.status("op_c")).present

    run(tmp_path, scenario)


@pytest.mark.rule("R4")
def test_no_free_slot_is_resource_exhausted(tmp_path: Path) -> None:
    """R4: with every slot of the kind in use, Dispatch is NO_FREE_SLOT and nothing is written."""

    async def scenario(live: Live) -> None:
        await live.dispatch("op_busy", sleep_ms=5000)
        code, reason, _ = await refused(live.dispatch("op_more"))
        assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "NO_FREE_SLOT")
        assert not (await live.status("op_more")).present
        await live.cancel("op_busy")

    run(tmp_path, scenario, writable_slots=1, read_only_slots=0, executor="sleep")


@pytest.mark.rule("R9")
def test_release_drops_result_keeps_dedupe(tmp_path: Path) -> None:
    """R9: Release drops the result; a later Dispatch of the id still dedupes."""

    async def scenario(live: Live) -> None:
        await live.dispatch("op_r", output="keep")
        await live.wait_settled("op_r")
        request = R.ReleaseRequest(
            operation_id="op_r", expected_incarnation_id=live.incarnation, fencing_token=1
        )
        reply = await live.stub.Release(request)
        assert reply.released and reply.incarnation_id == live.incarnation
        status = (await live.status("op_r")).operation
        assert status.released and not status.HasField("result")
        assert status.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
        again = await live.dispatch("op_r", output="keep")
        assert again.duplicate
        unknown = R.ReleaseRequest(operation_id="op_none", expected_incarnation_id=live.incarnation)
        assert not (await live.stub.Release(unknown)).released

    run(tmp_path, scenario)


@pytest.mark.rule("C2")
def test_batch_status_in_request_order(tmp_path: Path) -> None:
    """C2: one preflight call answers many ids, in request order, with the incarnation."""

    async def scenario(live: Live) -> None:
        await live.dispatch("op_b1")
        reply = await live.stub.BatchGetOperationStatus(
            R.BatchGetOperationStatusRequest(operation_ids=["op_b2", "op_b1"])
        )
        assert [(e.operation_id, e.present) for e in reply.entries] == [
            ("op_b2", False),
            ("op_b1", True),
        ]
        assert reply.incarnation_id == live.incarnation and reply.durable

    run(tmp_path, scenario)


def test_empty_operation_id_is_argument_invalid(tmp_path: Path) -> None:
    """Bad input: an empty operation id gets a typed INVALID_ARGUMENT."""

    async def scenario(live: Live) -> None:
        code, reason, _ = await refused(live.status(""))
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGUMENT_INVALID")

    run(tmp_path, scenario)


def test_runner_info_reports_pools_and_identity(tmp_path: Path) -> None:
    """GetRunnerInfo: incarnation, store, durability, both pools with size and use."""

    async def scenario(live: Live) -> None:
        await live.dispatch("op_i", sleep_ms=5000, kind=READ_ONLY)
        await live.wait_state("op_i", lambda op: op.state == R.RUNNER_OPERATION_STATE_RUNNING)
        info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
        assert info.incarnation_id == live.incarnation and info.store_id == live.runner.store_id
        assert info.durable and info.accepting and info.version
        pools = {p.kind: (p.size, p.in_use) for p in info.pools}
        assert pools == {turn_pb2.TURN_KIND_WRITABLE: (2, 0), turn_pb2.TURN_KIND_READ_ONLY: (3, 1)}
        assert info.held_result_not_saved == 0 and info.HasField("started_at")
        await live.cancel("op_i")

    run(tmp_path, scenario, writable_slots=2, read_only_slots=3, executor="sleep")


@pytest.mark.rule("R6")
def test_deadline_and_budget_stop_a_turn_as_timed_out(tmp_path: Path) -> None:
    """R6: the deadline and the run-time budget are stop reasons that end TIMED_OUT."""

    async def scenario(live: Live) -> None:
        await live.dispatch("op_d", sleep_ms=10_000, deadline=time.time() + 0.3)
        await live.dispatch("op_b", sleep_ms=10_000, budget_ms=300)
        await live.dispatch("op_late", deadline=time.time() - 1)
        for op, stop, reason in (
            ("op_d", turn_pb2.STOP_REASON_DEADLINE, "DEADLINE_EXCEEDED"),
            ("op_b", turn_pb2.STOP_REASON_BUDGET, "BUDGET_EXHAUSTED"),
        ):
            done = await live.wait_settled(op)
            assert done.state == R.RUNNER_OPERATION_STATE_TIMED_OUT
            assert (done.stop_reason, done.error.reason) == (stop, reason)
            assert done.execution == turn_pb2.EXECUTION_STARTED
        late = await live.wait_settled("op_late")
        assert late.state == R.RUNNER_OPERATION_STATE_TIMED_OUT
        assert late.execution == turn_pb2.EXECUTION_NOT_STARTED

    run(tmp_path, scenario)


@pytest.mark.rule("C9")
def test_watch_streams_history_then_live_changes_then_heartbeats(tmp_path: Path) -> None:
    """C9: WatchOperations replays changes after the cursor, then live ones, then heartbeats."""

    async def scenario(live: Live) -> None:
        await live.dispatch("op_w1")
        await live.wait_settled("op_w1")
        stream = live.stub.WatchOperations(R.WatchOperationsRequest(after_sequence=0))
        first = await asyncio.wait_for(stream.read(), 5)
        assert first.incarnation_id == live.incarnation
        assert first.operation.operation_id == "op_w1"
        assert first.operation.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
        await live.dispatch("op_w2")
        seen: list[tuple[str, int]] = []
        for _ in range(20):
            message = await asyncio.wait_for(stream.read(), 5)
            if message.HasField("operation"):
                seen.append((message.operation.operation_id, message.operation.state))
                if seen[-1] == ("op_w2", R.RUNNER_OPERATION_STATE_SUCCEEDED):
                    break
        assert ("op_w2", R.RUNNER_OPERATION_STATE_SUCCEEDED) in seen
        heartbeat = await asyncio.wait_for(stream.read(), 5)
        assert not heartbeat.HasField("operation") and heartbeat.incarnation_id == live.incarnation
        cursor = first.operation.sequence
        resumed = live.stub.WatchOperations(R.WatchOperationsRequest(after_sequence=cursor))
        message = await asyncio.wait_for(resumed.read(), 5)
        assert message.operation.operation_id == "op_w2"
        stream.cancel()
        resumed.cancel()

    run(tmp_path, scenario, settings=ServiceSettings(heartbeat_seconds=0.2))


@pytest.mark.rule("R8")
def test_watch_ends_cleanly_on_shutdown(tmp_path: Path) -> None:
    """R8: an open WatchOperations stream ends with OK when the runner stops."""

    async def main() -> None:
        async with live_runner(tmp_path / "runner.db") as live:
            stream = live.stub.WatchOperations(R.WatchOperationsRequest(after_sequence=0))
            reader = asyncio.ensure_future(stream.read())
            await asyncio.sleep(0.1)
            await live.runner.stop()
            await asyncio.wait_for(reader, 5)
            assert await stream.code() == grpc.StatusCode.OK

    asyncio.run(main())


def _pools(message: runner_pb2.WatchOperationsResponse) -> dict[int, tuple[int, int]]:
    return {pool.kind: (pool.size, pool.in_use) for pool in message.pools}


async def _next_heartbeat(
    stream: Any, after: tuple[str, int] | None = None
) -> runner_pb2.WatchOperationsResponse:
    """The next heartbeat on ``stream`` (after the row ``after``, operation and state)."""
    for _ in range(100):  # bounded: each read waits at most 5 s
        message: runner_pb2.WatchOperationsResponse = await asyncio.wait_for(stream.read(), 5)
        if message.HasField("operation"):
            if (message.operation.operation_id, message.operation.state) == after:
                after = None
        elif after is None:
            return message
    raise AssertionError("no heartbeat in 100 messages")


@pytest.mark.rule("R4")
def test_a_watch_stream_opens_at_once_with_the_slot_pools(tmp_path: Path) -> None:
    """R4, issue 9: a stream's first message goes out at once, a heartbeat when there is
    nothing to replay, and carries the pools (size, in use) as GetRunnerInfo has them."""
    gated = GatedExecutor(finish_at_once=False)

    async def scenario(live: Live) -> None:
        await live.dispatch("op_held")
        held = await live.wait_state(
            "op_held", lambda op: op.state == R.RUNNER_OPERATION_STATE_RUNNING
        )
        stream = live.stub.WatchOperations(R.WatchOperationsRequest(after_sequence=held.sequence))
        opening = await asyncio.wait_for(stream.read(), 5)  # heartbeats are 30 s apart
        assert not opening.HasField("operation") and opening.incarnation_id == live.incarnation
        assert _pools(opening) == {WRITABLE: (2, 1), READ_ONLY: (1, 0)}
        info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
        assert list(opening.pools) == list(info.pools)
        replay = live.stub.WatchOperations(R.WatchOperationsRequest(after_sequence=0))
        first = await asyncio.wait_for(replay.read(), 5)
        assert first.operation.operation_id == "op_held"
        assert _pools(first) == {WRITABLE: (2, 1), READ_ONLY: (1, 0)}
        stream.cancel()
        replay.cancel()
        gated.handles["op_held"].finish.set()
        await live.wait_settled("op_held")

    settings = ServiceSettings(heartbeat_seconds=30.0, writable_slots=2, read_only_slots=1)
    run(tmp_path, scenario, settings=settings, executor_override=gated)


@pytest.mark.rule("R4")
def test_watch_heartbeats_carry_the_slot_pools_in_use_now(tmp_path: Path) -> None:
    """R4, issue 9: every heartbeat reports each pool's size and slots in use at that
    moment: the slot a running turn holds, then none once it has settled."""
    gated = GatedExecutor(finish_at_once=False)

    async def scenario(live: Live) -> None:
        stream = live.stub.WatchOperations(R.WatchOperationsRequest(after_sequence=0))
        assert _pools(await _next_heartbeat(stream)) == {WRITABLE: (2, 0), READ_ONLY: (1, 0)}
        await live.dispatch("op_busy", kind=READ_ONLY)
        busy = await _next_heartbeat(stream, ("op_busy", R.RUNNER_OPERATION_STATE_RUNNING))
        assert _pools(busy) == {WRITABLE: (2, 0), READ_ONLY: (1, 1)}
        gated.handles["op_busy"].finish.set()
        idle = await _next_heartbeat(stream, ("op_busy", R.RUNNER_OPERATION_STATE_SUCCEEDED))
        assert _pools(idle) == {WRITABLE: (2, 0), READ_ONLY: (1, 0)}
        stream.cancel()

    settings = ServiceSettings(heartbeat_seconds=0.2, writable_slots=2, read_only_slots=1)
    run(tmp_path, scenario, settings=settings, executor_override=gated)


def _held(live: Live, op: str, hold_ms: int, **knobs: object) -> Any:
    body = envelope(op, **knobs)  # type: ignore[arg-type]
    request = dispatch_request(op, body, live.incarnation)
    request.reply_hold_ms = hold_ms
    return live.stub.Dispatch(request)


class _Reader:
    """Reads a WatchOperations stream in the background (a read cut by a timeout
    would cancel the whole call), keeping the operation messages."""

    def __init__(self, stream: Any) -> None:
        self.ops: list[tuple[str, int]] = []
        self._task = asyncio.ensure_future(self._read(stream))
        self._stream = stream

    async def _read(self, stream: Any) -> None:
        while True:  # ends when the test cancels the call
            message = await stream.read()
            if message is grpc.aio.EOF:
                return
            if message.HasField("operation"):
                self.ops.append((message.operation.operation_id, message.operation.state))

    async def until(self, wanted: tuple[str, int], within: float) -> None:
        for _ in range(int(within / 0.02)):  # bounded
            if wanted in self.ops:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"{wanted} never came on the watch; saw {self.ops}")

    async def close(self) -> None:
        self._stream.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await self._task


@pytest.mark.rule("C9", "C10")
def test_a_held_dispatch_reply_carries_the_settled_row_and_the_watch_leaves_it_out(
    tmp_path: Path,
) -> None:
    """C9, C10, issue 10: with reply_hold_ms, a turn that settles within the hold is
    answered with its settled row, and an open watch shows none of its changes: the reply
    carries them. Its release does not come either (the coordinator released it); an
    unheld turn's changes do."""

    async def scenario(live: Live) -> None:
        stream = live.stub.WatchOperations(R.WatchOperationsRequest(after_sequence=0))
        await asyncio.wait_for(stream.read(), 5)  # the opening heartbeat
        reader = _Reader(stream)
        try:
            reply = await _held(live, "op_h1", 2000)
            assert reply.operation.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            assert reply.operation.execution == turn_pb2.EXECUTION_STARTED
            await asyncio.sleep(0.5)
            assert reader.ops == []
            await live.stub.Release(
                R.ReleaseRequest(
                    operation_id="op_h1", expected_incarnation_id=live.incarnation, fencing_token=1
                )
            )
            # Released: the coordinator that released it learns nothing from that.
            await live.dispatch("op_h2")  # unheld: its changes do come on the watch
            await reader.until(("op_h2", R.RUNNER_OPERATION_STATE_SUCCEEDED), 5)
            assert "op_h1" not in [op for op, _ in reader.ops]
        finally:
            await reader.close()

    run(tmp_path, scenario, settings=ServiceSettings(heartbeat_seconds=5))


@pytest.mark.rule("C9")
def test_a_turn_longer_than_the_hold_is_answered_unsettled_and_settles_on_the_watch(
    tmp_path: Path,
) -> None:
    """C9, issue 10: the hold is bounded: a turn still running when it ends (here the
    longest hold, 1 s, on a 4 s turn) is answered with its row as it is then, launched
    and confirmed started (an unheld reply shows it only accepted), not settled; its
    settlement then comes on the watch."""

    async def scenario(live: Live) -> None:
        stream = live.stub.WatchOperations(R.WatchOperationsRequest(after_sequence=0))
        await asyncio.wait_for(stream.read(), 5)
        reader = _Reader(stream)
        try:
            reply = await _held(live, "op_h2", 60_000, sleep_ms=4000)  # capped at 1 s
            assert reply.operation.state == R.RUNNER_OPERATION_STATE_RUNNING
            assert not settled(reply.operation)
            await reader.until(("op_h2", R.RUNNER_OPERATION_STATE_SUCCEEDED), 10)
        finally:
            await reader.close()

    run(tmp_path, scenario, settings=ServiceSettings(heartbeat_seconds=5))


@pytest.mark.rule("C10")
def test_releases_carried_on_a_dispatch_are_applied_and_bad_ones_change_nothing(
    tmp_path: Path,
) -> None:
    """C10, issue 10: a Dispatch may carry Releases owed to this runner; each is applied
    as a Release call would be (the settled row drops its result), and one the runner
    refuses (another incarnation, an unknown id) changes nothing, the Dispatch included."""

    async def scenario(live: Live) -> None:
        await live.dispatch("op_r1")
        await live.wait_settled("op_r1")
        body = envelope("op_r2")
        request = dispatch_request("op_r2", body, live.incarnation)
        request.releases.extend(
            [
                R.ReleaseRequest(
                    operation_id="op_r1", expected_incarnation_id=live.incarnation, fencing_token=1
                ),
                R.ReleaseRequest(
                    operation_id="op_nobody", expected_incarnation_id=live.incarnation
                ),
                R.ReleaseRequest(operation_id="op_r1", expected_incarnation_id="0" * 32),
            ]
        )
        reply = await live.stub.Dispatch(request)
        assert reply.operation.operation_id == "op_r2" and not reply.duplicate
        released = await live.wait_state("op_r1", lambda op: op.released)
        assert not released.HasField("result")
        assert (await live.status("op_nobody")).present is False
        assert (await live.wait_settled("op_r2")).state == R.RUNNER_OPERATION_STATE_SUCCEEDED

    run(tmp_path, scenario)


@pytest.mark.rule("C10")
def test_a_carried_release_with_a_token_past_2_63_refuses_the_whole_dispatch(
    tmp_path: Path,
) -> None:
    """Bad input, C10: a carried Release's fencing token at 2^63 or more is refused at
    the edge like any other uint64 there (typed INVALID_ARGUMENT): the Dispatch admits
    nothing and the release is not applied."""

    async def scenario(live: Live) -> None:
        await live.dispatch("op_t1")
        await live.wait_settled("op_t1")
        request = dispatch_request("op_t2", envelope("op_t2"), live.incarnation)
        request.releases.append(
            R.ReleaseRequest(
                operation_id="op_t1", expected_incarnation_id=live.incarnation, fencing_token=2**63
            )
        )
        code, reason, _ = await refused(live.stub.Dispatch(request))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, reason
        assert not (await live.status("op_t2")).present
        assert not (await live.status("op_t1")).operation.released

    run(tmp_path, scenario)
