"""The §6.1 witness over a real channel: stamps, the floor, the chain, the seal."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from runner_svc.service_types import ServiceSettings
from tests.runner.contract.test_runner_contract import refused, run
from tests.runner.live import Live, dispatch_request, envelope, live_runner
from turnwire.ids import stamp_now
from turnwire.runner.v1 import runner_pb2

R = runner_pb2


@pytest.mark.rule("W1")
def test_a_dispatch_without_a_stamp_is_invalid_and_admits_nothing(tmp_path: Path) -> None:
    """§6.1 W1: a Dispatch without its stamp is ARGUMENT_INVALID and admits nothing."""

    async def scenario(live: Live) -> None:
        body = envelope("op_nostamp")
        request = replace_stamp(dispatch_request("op_nostamp", body, live.incarnation), 0)
        code, reason, _ = await refused(live.stub.Dispatch(request))
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGUMENT_INVALID")
        assert not (await live.status("op_nostamp")).present

    run(tmp_path, scenario)


@pytest.mark.rule("W2")
def test_a_dispatch_older_than_the_window_is_refused_stale(tmp_path: Path) -> None:
    """W2: the floor trails the clock by the window; an old stamp is a definite refusal."""

    async def scenario(live: Live) -> None:
        body = envelope("op_old")
        minute_ago = stamp_now() - 60_000_000
        request = replace_stamp(dispatch_request("op_old", body, live.incarnation), minute_ago)
        for _ in range(100):  # the floor keeper's first raise (bounded: 5 s)
            info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
            if info.store_opens:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        code, reason, meta = await refused(live.stub.Dispatch(request))
        assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "DISPATCH_STALE")
        assert meta["incarnation_id"] == live.incarnation
        assert not (await live.status("op_old")).present
        info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
        assert all(pool.in_use == 0 for pool in info.pools)

    run(tmp_path, scenario)


@pytest.mark.rule("W2a", "C6c")
def test_a_dispatch_one_second_old_is_refused_and_the_refusal_names_the_floor(
    tmp_path: Path,
) -> None:
    """W2a: with a 0.25 s window (the default stays 7 s) the floor trails the clock by
    at most half a second, so a Dispatch stamped one second ago is refused
    DISPATCH_STALE (a 7 s window admits it). The refusal names the floor (C6c:
    ErrorInfo admission_floor), above the stamp and never above the clock minus the
    0.25 s window."""

    async def scenario(live: Live) -> None:
        for _ in range(100):  # the floor keeper's first raise (bounded: 5 s)
            info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
            if info.store_opens:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.6)  # more than window + interval since it started
        second_ago = stamp_now() - 1_000_000
        request = replace_stamp(
            dispatch_request("op_late", envelope("op_late"), live.incarnation), second_ago
        )
        code, reason, meta = await refused(live.stub.Dispatch(request))
        assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "DISPATCH_STALE")
        floor = int(meta["admission_floor"])
        assert second_ago < floor <= stamp_now() - 250_000
        assert not (await live.status("op_late")).present

    run(tmp_path, scenario, settings=ServiceSettings(admission_window_seconds=0.25))


@pytest.mark.rule("W2", "W3")
def test_a_clean_stop_seals_and_the_next_incarnation_vouches(tmp_path: Path) -> None:
    """W2/W3: SIGTERM-style stop seals the floor; the chain shows it to the next owner."""
    store = tmp_path / "runner.db"

    async def main() -> tuple[str, runner_pb2.GetOperationStatusResponse]:
        async with live_runner(store) as first:
            done = await first.dispatch("op_ran")
            await first.wait_settled("op_ran")
            first_incarnation = first.incarnation
            assert done.operation.dispatch_stamp > 0
        async with live_runner(store) as second:
            return first_incarnation, await second.status("op_ran")

    first_incarnation, seen = asyncio.run(main())
    opening = seen.store_opens[0]
    assert opening.incarnation_id == seen.incarnation_id
    assert opening.predecessor_incarnation_id == first_incarnation
    assert opening.predecessor_floor == 2**63 - 1
    assert seen.present and seen.operation.state == R.RUNNER_OPERATION_STATE_SUCCEEDED


def replace_stamp(request: runner_pb2.DispatchRequest, stamp: int) -> runner_pb2.DispatchRequest:
    changed = runner_pb2.DispatchRequest()
    changed.CopyFrom(request)
    changed.dispatch_stamp = stamp
    return changed
