"""The runner-gateway port (coordinator_svc.ports.RunnerGateway), one contract for
both adapters (issue 9): RunnerClient over real gRPC, and the in-process fake over
the same real RunnerService. Each answer must be the same core event."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core import commands as cmd
from coordinator_svc.core.events import (
    CancelAnswered,
    CancelFailed,
    DispatchAccepted,
    DispatchRefused,
    PreflightAnswer,
)
from coordinator_svc.core.model import OpState, TurnKind
from coordinator_svc.core.runner_view import RunnerOpState
from coordinator_svc.dispatcher import utc_now
from coordinator_svc.dispatcher.metrics import DispatcherMetrics
from coordinator_svc.dispatcher.runner_client import RunnerClient
from coordinator_svc.ports import RunnerGateway
from coordinator_svc.storage import FakeJournal
from turnwire.ids import dispatch_stamp
from turnwire.testing.dispatcher_rig import TIMINGS, Rig, new_operation
from turnwire.testing.runner_gateway import InProcessRunner

Scenario = Callable[[RunnerGateway, str], Awaitable[None]]


def _run(tmp_path: Path, adapter: str, scenario: Scenario) -> None:
    async def body() -> None:
        rig = Rig(tmp_path, FakeJournal())
        running = await rig.start_runner("r1", slots=2)
        gateway: RunnerGateway = (
            RunnerClient(
                RunnerEndpoint("r1", running.address),
                TIMINGS,
                DispatcherMetrics(),
                rig.credentials,
            )
            if adapter == "grpc"
            else InProcessRunner("r1", running.service)
        )
        try:
            await scenario(gateway, running.incarnation_id)
        finally:
            await gateway.close()
            await rig.close()

    asyncio.run(body())


ADAPTERS = pytest.mark.parametrize("adapter", ["grpc", "in_process"])


def _dispatch(incarnation: str, attempt: int = 1) -> cmd.Dispatch:
    return cmd.Dispatch("r1", attempt, incarnation, 1, dispatch_stamp(utc_now()))


@pytest.mark.rule("C2", "R1")
@ADAPTERS
def test_an_unknown_id_is_absent_on_the_runners_incarnation(tmp_path: Path, adapter: str) -> None:
    """C2, R1: a status answer names the incarnation and the store, even for no row."""

    async def scenario(gateway: RunnerGateway, incarnation: str) -> None:
        (answer,) = await gateway.statuses([("op_unknown", 3)])
        assert isinstance(answer, PreflightAnswer)
        assert (answer.runner, answer.incarnation_id, answer.present) == ("r1", incarnation, False)
        assert answer.asked_attempt == 3 and answer.store_id

    _run(tmp_path, adapter, scenario)


@pytest.mark.rule("C5", "R2")
@ADAPTERS
def test_a_dispatch_is_accepted_once_and_a_repeat_is_a_duplicate(
    tmp_path: Path, adapter: str
) -> None:
    """C5, R2: accepted on the named incarnation; the same attempt again is a duplicate;
    the row then shows in status answers and settles."""

    async def scenario(gateway: RunnerGateway, incarnation: str) -> None:
        record, _ = new_operation()
        first = await gateway.dispatch(record, _dispatch(incarnation))
        assert isinstance(first, DispatchAccepted) and not first.duplicate
        assert first.incarnation_id == incarnation and first.attempt == 1
        again = await gateway.dispatch(record, _dispatch(incarnation))
        assert isinstance(again, DispatchAccepted) and again.duplicate
        for _ in range(200):  # bounded: 10 s until the metered turn settles
            (answer,) = await gateway.statuses([(record.operation_id, 1)])
            assert isinstance(answer, PreflightAnswer) and answer.present and answer.op
            if answer.op.settled:
                assert answer.op.state is RunnerOpState.SUCCEEDED
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the turn never settled")
        done = cmd.Release("r1", incarnation, 1, record=True)
        assert await gateway.release(record.operation_id, done)

    _run(tmp_path, adapter, scenario)


@pytest.mark.rule("C5", "C6")
@ADAPTERS
def test_a_dispatch_for_another_incarnation_is_a_definite_refusal(
    tmp_path: Path, adapter: str
) -> None:
    """C5, C6: a stale expected incarnation is refused INCARNATION_MISMATCH, naming ours."""

    async def scenario(gateway: RunnerGateway, incarnation: str) -> None:
        record, _ = new_operation()
        refused = await gateway.dispatch(record, _dispatch("0" * 32))
        assert isinstance(refused, DispatchRefused)
        assert (refused.reason, refused.incarnation_id) == ("INCARNATION_MISMATCH", incarnation)

    _run(tmp_path, adapter, scenario)


@pytest.mark.rule("R5", "C8b")
@ADAPTERS
def test_a_cancel_of_an_unknown_id_tombstones_it_and_bars_its_dispatch(
    tmp_path: Path, adapter: str
) -> None:
    """R5, C8b: the tombstone proves no Dispatch for the id ever runs there."""

    async def scenario(gateway: RunnerGateway, incarnation: str) -> None:
        record, _ = new_operation()
        answered = await gateway.cancel(record, cmd.Cancel("r1", incarnation, 1))
        assert isinstance(answered, CancelAnswered) and answered.tombstoned
        assert answered.op is not None and answered.op.state is RunnerOpState.TOMBSTONED
        refused = await gateway.dispatch(record, _dispatch(incarnation))
        assert isinstance(refused, DispatchRefused)
        assert refused.reason == "CANCELLED_BEFORE_DISPATCH"
        stale = await gateway.cancel(record, cmd.Cancel("r1", "0" * 32, 1))
        assert isinstance(stale, CancelFailed) and stale.reason == "INCARNATION_MISMATCH"

    _run(tmp_path, adapter, scenario)


@pytest.mark.rule("R4", "C9")
@ADAPTERS
def test_info_and_the_watch_show_the_pools_and_the_rows(tmp_path: Path, adapter: str) -> None:
    """R4, C9: pool sizes from info; the watch replays a row with the pools in use."""

    async def scenario(gateway: RunnerGateway, incarnation: str) -> None:
        info = await gateway.info()
        assert (info.incarnation_id, info.slot_sizes) == (
            incarnation,
            {TurnKind.WRITABLE: 2, TurnKind.READ_ONLY: 4},
        )
        assert info.store_id  # every runner store has one (§6)
        record, _ = new_operation({"sleep_ms": "300"})
        accepted = await gateway.dispatch(record, _dispatch(incarnation))
        assert isinstance(accepted, DispatchAccepted)
        call = gateway.watch(0)
        try:
            async with asyncio.timeout(10):
                async for message in call:
                    if message.HasField("operation"):
                        assert message.incarnation_id == incarnation
                        assert message.operation.operation_id == record.operation_id
                        assert any(p.in_use for p in message.pools)
                        break
        finally:
            call.cancel()

    _run(tmp_path, adapter, scenario)


def test_the_dispatcher_runs_turns_on_the_in_process_fake_without_grpc(tmp_path: Path) -> None:
    """Issue 9: the shell performs commands only through the gateway port: with the
    fake, turns succeed end to end and the coordinator makes no gRPC call at all."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            running = await rig.start_runner("r1", slots=2)
            dispatcher = rig.make_dispatcher(
                gateways={"r1": InProcessRunner("r1", running.service)}
            )
            await dispatcher.start()
            ops = [await rig.submit({"sleep_ms": "50"}) for _ in range(6)]
            done = [await rig.terminal(op) for op in ops]
            assert [d.state for d in done] == [OpState.SUCCEEDED] * 6
            assert all(rig.starts()[op] == 1 for op in ops)
            assert sum(dispatcher.metrics.rpc_calls.values()) == 0
        finally:
            await rig.close()

    asyncio.run(scenario())
