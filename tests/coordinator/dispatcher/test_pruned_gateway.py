"""A pruned runner row as the coordinator reads it (issue 12, PROTOCOL.md §9 K3).

Over real gRPC (RunnerClient) and the in-process adapter, against a real
runner whose store pruned a released turn: no call about it can read as
"absent" or as a definite refusal. Status is no answer (alone, or in a batch
whose other ids are answered), a Dispatch is unknown (C7), a Cancel fails and
leaves no tombstone. So a coordinator that still believed the turn live (a
journal restored from an old backup) could never replay it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core import commands as cmd
from coordinator_svc.core.events import (
    CancelFailed,
    DispatchAccepted,
    DispatchUnknown,
    PreflightAnswer,
    PreflightFailed,
)
from coordinator_svc.dispatcher import utc_now
from coordinator_svc.dispatcher.metrics import DispatcherMetrics
from coordinator_svc.dispatcher.runner_client import RunnerClient
from coordinator_svc.ports import RunnerGateway
from coordinator_svc.storage import FakeJournal
from runner_svc.app import RunningRunner
from turnwire.ids import dispatch_stamp
from turnwire.testing.dispatcher_rig import TIMINGS, Rig, new_operation
from turnwire.testing.runner_gateway import InProcessRunner

Scenario = Callable[[RunnerGateway, RunningRunner, Path], Awaitable[None]]


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
            await scenario(gateway, running, tmp_path / "r1.db")
        finally:
            await gateway.close()
            await rig.close()

    asyncio.run(body())


def _dispatch(incarnation: str) -> cmd.Dispatch:
    return cmd.Dispatch("r1", 1, incarnation, 1, dispatch_stamp(utc_now()))


@pytest.mark.rule("K3", "C2", "C6", "C7", "C8b")
@pytest.mark.parametrize("adapter", ["grpc", "in_process"])
def test_a_pruned_turn_is_never_absent_nor_refused_for_good(tmp_path: Path, adapter: str) -> None:
    """§9 K3, C2, C6, C7, C8b: after the runner pruned a released turn, a preflight for it is
    no answer (never "absent", which would license a replay), a Dispatch for it is unknown
    (never a definite refusal, which would let the turn be routed anew), and a Cancel for it
    fails without a tombstone (which would prove NOT_STARTED of a turn that ran)."""

    async def scenario(gateway: RunnerGateway, running: RunningRunner, store: Path) -> None:
        incarnation = running.incarnation_id
        record, _ = new_operation()
        op = record.operation_id
        assert isinstance(await gateway.dispatch(record, _dispatch(incarnation)), DispatchAccepted)
        for _ in range(200):  # bounded: 10 s until the metered turn settles
            (answer,) = await gateway.statuses([(op, 1)])
            if isinstance(answer, PreflightAnswer) and answer.op and answer.op.settled:
                break
            await asyncio.sleep(0.05)
        assert await gateway.release(op, cmd.Release("r1", incarnation, 1, record=True))
        with sqlite3.connect(store) as raw:  # released eight days ago, as far as it knows
            raw.execute("UPDATE runner_operations SET released_at = ?", (time.time() - 8 * 86400,))
        assert running.retention is not None
        report = await running.retention.schedule.run_once()
        assert report is not None and report.counts["rows"] == 1

        (alone,) = await gateway.statuses([(op, 1)])
        assert isinstance(alone, PreflightFailed)
        in_batch = await gateway.statuses([(op, 1), ("op_never_sent", 2)])
        assert isinstance(in_batch[0], PreflightFailed)
        assert isinstance(in_batch[1], PreflightAnswer) and not in_batch[1].present

        again = await gateway.dispatch(record, _dispatch(incarnation))
        assert isinstance(again, DispatchUnknown), again
        assert "pruned" in again.detail

        cancelled = await gateway.cancel(record, cmd.Cancel("r1", incarnation, 1))
        assert isinstance(cancelled, CancelFailed) and cancelled.reason == "OPERATION_PRUNED"
        (still,) = await gateway.statuses([(op, 1)])
        assert isinstance(still, PreflightFailed)  # no tombstone was written

    _run(tmp_path, adapter, scenario)
