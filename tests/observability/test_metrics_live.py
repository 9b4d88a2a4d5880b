"""Prometheus metrics from a live run (issue 13).

A real in-process runner and coordinator (SQLite journal, real gRPC on
127.0.0.1) each serve /metrics on 127.0.0.1:0. Alice runs three turns to the
end and submits one of them again (a replay); bob's read-only turn waits
QUEUED (the runner has no read-only slot). Both endpoints are then scraped
over real HTTP, and every family docs/METRICS.md lists must be there with the
values this run makes true.
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from coordinator_svc.config import DispatchTimings
from coordinator_svc.core.quotas import PrincipalLimits
from tests.coordinator.api.harness import bearer, submit_request
from tests.support import runner_access
from tests.support.fault_interceptor import DROP_RESPONSE, Fault, FaultInterceptor
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from turnwire.observability.metrics_check import (
    COORDINATOR_FAMILIES,
    RUNNER_FAMILIES,
    missing_families,
)
from turnwire.testing.stack import Stack
from turnwire.vocabulary import TurnKind

pytestmark = pytest.mark.timeout(60)

STREAM_TIMEOUT = 20.0
# What an unreachable runner answers nothing to (the watch included).
UNREACHABLE = (
    "GetOperationStatus",
    "BatchGetOperationStatus",
    "WatchOperations",
    "GetRunnerInfo",
    "Cancel",
)
TURNS = 3
WRITABLE_SLOTS = 2


@dataclass(frozen=True)
class Scrapes:
    coordinator: str
    runner: str
    runner_incarnation: str
    not_found_status: int


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.status == 200
        body: bytes = reply.read()
        return body.decode()


def _status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


async def _run_to_end(stub: Any, key: str, token: str) -> coordinator_pb2.Operation:
    call = stub.SubmitAndWatch(
        coordinator_pb2.SubmitAndWatchRequest(submit=submit_request(key), terminal_only=True),
        metadata=bearer(token),
    )
    last = None
    async with asyncio.timeout(STREAM_TIMEOUT):
        async for message in call:
            last = message.operation
    assert last is not None
    return last


async def _until_released(runner: Any) -> None:
    """Until the runner holds no slot (its rows released after the terminal commits)."""
    for _ in range(200):
        if all(use.in_use == 0 for use in runner.service.pool_use()):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the runner kept a slot")


async def _until_the_coordinator_heard(coordinator: Any) -> None:
    """Until the coordinator counts no writable slot in use on r1. Its figure is the
    larger of its own count and the runner's last report, and the report sent with
    the last settled row may still count that turn's slot: the runner's next watch
    message (a heartbeat at the latest, 2 s) carries 0. The bound is what is tested."""
    scheduler = coordinator.dispatcher.room.scheduler
    for _ in range(200):
        if scheduler.in_use("r1", TurnKind.WRITABLE) == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the coordinator still counts a writable slot in use on r1 after 10 s")


def _live_run(tmp_path: Path) -> Scrapes:
    async def scenario() -> Scrapes:
        async with Stack(tmp_path, secret=runner_access.SECRET) as stack:
            runner = await stack.start_runner(
                "r1",
                executor="echo",
                writable_slots=WRITABLE_SLOTS,
                read_only_slots=0,  # bob's read-only turn can only wait
                metrics_listen="127.0.0.1:0",
            )
            alice, bob = stack.add_token("alice"), stack.add_token("bob")
            coordinator = await stack.start_coordinator(
                metrics_listen="127.0.0.1:0",
                metrics_address_file=str(tmp_path / "coordinator-metrics.addr"),
                # Bob may have one turn queued: his replay of it comes at his limit.
                principal_quotas=(("bob", PrincipalLimits(max_queued=1)),),
            )
            try:
                assert coordinator.metrics is not None and runner.metrics is not None
                written = (tmp_path / "coordinator-metrics.addr").read_text().strip()
                assert written == coordinator.metrics.address
                async with grpc.aio.insecure_channel(coordinator.address) as channel:
                    stub: Any = coordinator_pb2_grpc.TurnServiceStub(channel)
                    ran = await asyncio.gather(
                        *(_run_to_end(stub, f"metrics-{i}", alice) for i in range(TURNS))
                    )
                    assert all(op.state == coordinator_pb2.OPERATION_STATE_SUCCEEDED for op in ran)
                    replay = await stub.SubmitTurn(
                        submit_request("metrics-0"), metadata=bearer(alice)
                    )
                    assert replay.replayed
                    waiting = await stub.SubmitTurn(
                        submit_request("metrics-ro", kind=turn_pb2.TURN_KIND_READ_ONLY),
                        metadata=bearer(bob),
                    )
                    assert waiting.operation.state == coordinator_pb2.OPERATION_STATE_QUEUED
                    # At his limit, a retry of that submit is still answered (C1): a replay.
                    again = await stub.SubmitTurn(
                        submit_request("metrics-ro", kind=turn_pb2.TURN_KIND_READ_ONLY),
                        metadata=bearer(bob),
                    )
                    assert again.replayed
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await stub.SubmitTurn(submit_request("x"), metadata=bearer("wrong"))
                    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
                await _until_released(runner)
                await _until_the_coordinator_heard(coordinator)
                coordinator_text, runner_text, not_found = await asyncio.gather(
                    asyncio.to_thread(_get, coordinator.metrics.url),
                    asyncio.to_thread(_get, runner.metrics.url),
                    asyncio.to_thread(
                        _status_of, coordinator.metrics.url.removesuffix("/metrics") + "/other"
                    ),
                )
            finally:
                await stack.stop_coordinator()
                await runner.stop(drain=True)
        return Scrapes(coordinator_text, runner_text, runner.incarnation_id, not_found)

    return asyncio.run(scenario())


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrapes]:
    yield _live_run(tmp_path_factory.mktemp("metrics"))


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_every_documented_family_is_served_by_each_service(scrapes: Scrapes) -> None:
    assert missing_families(scrapes.coordinator, COORDINATOR_FAMILIES) == []
    assert missing_families(scrapes.runner, RUNNER_FAMILIES) == []
    assert scrapes.not_found_status == 404


def test_coordinator_figures_match_the_run(scrapes: Scrapes) -> None:
    """Operations by state and execution, replays, attempts, queue depth, slots and
    latency counts are what three turns, one replay and one waiting turn make."""
    s = _samples(scrapes.coordinator)
    assert _value(s, "turnwire_operations", state="SUCCEEDED", execution="STARTED") == TURNS
    assert _value(s, "turnwire_operations", state="QUEUED", execution="NOT_STARTED") == 1
    assert _value(s, "turnwire_operations", state="TIMED_OUT", execution="UNKNOWN") == 0
    assert not any(name == "turnwire_operations_unknown" for name, _ in s)  # none ambiguous
    assert _value(s, "turnwire_journal_readable") == 1
    assert (
        _value(s, "turnwire_operations_finished_total", state="SUCCEEDED", execution="STARTED")
        == TURNS
    )
    assert _value(s, "turnwire_submit_replays_total") == 2  # alice's, and bob's at his quota
    assert _value(s, "turnwire_attempts_total", runner="r1") == TURNS
    assert _value(s, "turnwire_dispatch_unknown_total") == 0
    assert _value(s, "turnwire_reconciled_without_resend_total") == 0
    assert _value(s, "turnwire_queue_depth", principal="bob") == 1
    # Alice has nothing left in flight: she is shown at 0 or not at all.
    assert s.get(("turnwire_queue_depth", frozenset({("principal", "alice")})), 0) == 0
    slot = {"runner": "r1", "pool": "default"}
    assert _value(s, "turnwire_scheduler_runner_slots", kind="WRITABLE", **slot) == WRITABLE_SLOTS
    assert _value(s, "turnwire_scheduler_runner_slots", kind="READ_ONLY", **slot) == 0
    assert _value(s, "turnwire_scheduler_runner_slots_in_use", kind="WRITABLE", **slot) == 0
    # Four submits reached the journal (three new, one replay); every write was timed.
    assert _value(s, "turnwire_journal_commit_seconds_count", write="submit") == TURNS + 2
    assert _value(s, "turnwire_journal_commit_seconds_count", write="commit") >= TURNS
    api = {"grpc_service": "turnwire.coordinator.v1.TurnService", "grpc_code": "OK"}
    assert (
        _value(s, "turnwire_grpc_server_handling_seconds_count", grpc_method="SubmitTurn", **api)
        == 3
    )
    # A refused call is timed under its own code.
    refused = {**api, "grpc_code": "UNAUTHENTICATED"}
    assert (
        _value(
            s, "turnwire_grpc_server_handling_seconds_count", grpc_method="SubmitTurn", **refused
        )
        == 1
    )
    runner_api = {
        "runner": "r1",
        "grpc_service": "turnwire.runner.v1.RunnerService",
        "grpc_code": "OK",
    }
    dispatches = _value(
        s, "turnwire_grpc_client_handling_seconds_count", grpc_method="Dispatch", **runner_api
    )
    assert dispatches == TURNS


def test_runner_figures_match_the_run(scrapes: Scrapes) -> None:
    s = _samples(scrapes.runner)
    assert _value(s, "turnwire_runner_slots", kind="WRITABLE") == WRITABLE_SLOTS
    assert _value(s, "turnwire_runner_slots", kind="READ_ONLY") == 0
    assert _value(s, "turnwire_runner_slots_in_use", kind="WRITABLE") == 0
    assert _value(s, "turnwire_runner_accepting") == 1
    assert _value(s, "turnwire_runner_dispatches_total", outcome="admitted", reason="") == TURNS
    info = [labels for name, labels in s if name == "turnwire_runner_info"]
    assert [dict(labels)["incarnation_id"] for labels in info] == [scrapes.runner_incarnation]
    # Admission, start and result at least, per turn (writes of one loop turn share one).
    assert _value(s, "turnwire_store_commit_seconds_count") >= TURNS
    dispatch = {"grpc_service": "turnwire.runner.v1.RunnerService", "grpc_method": "Dispatch"}
    assert (
        _value(s, "turnwire_grpc_server_handling_seconds_count", grpc_code="OK", **dispatch)
        == TURNS
    )
    assert _value(s, "turnwire_runner_refused_callers_total") == 0


def _ambiguous_run(tmp_path: Path) -> tuple[str, coordinator_pb2.Operation]:
    """One turn whose Dispatch reply is lost, after which the runner answers nothing:
    the coordinator cannot know whether it ran and, past the reconcile deadline, ends
    it with execution UNKNOWN (C8). Returns the coordinator's scrape and the turn."""
    faults = FaultInterceptor()
    faults.faults.append(
        Fault("Dispatch", DROP_RESPONSE, on_fire=lambda: faults.block(*UNREACHABLE))
    )

    async def scenario() -> tuple[str, coordinator_pb2.Operation]:
        async with Stack(tmp_path, secret=runner_access.SECRET) as stack:
            await stack.start_runner("r1", executor="echo")
            alice = stack.add_token("alice")
            coordinator = await stack.start_coordinator(
                interceptors=faults.all(),
                timings=DispatchTimings(
                    preflight_timeout=0.3,
                    backoff_initial=0.05,
                    backoff_max=0.2,
                    idle_poll=0.1,
                    reconcile_deadline=1.0,
                ),
                metrics_listen="127.0.0.1:0",
            )
            assert coordinator.metrics is not None
            async with grpc.aio.insecure_channel(coordinator.address) as channel:
                stub: Any = coordinator_pb2_grpc.TurnServiceStub(channel)
                ended = await _run_to_end(stub, "metrics-unknown", alice)
            text = await asyncio.to_thread(_get, coordinator.metrics.url)
        return text, ended

    return asyncio.run(scenario())


def test_an_unknown_execution_is_counted_by_its_reason(tmp_path: Path) -> None:
    text, ended = _ambiguous_run(tmp_path)
    assert ended.execution == turn_pb2.EXECUTION_UNKNOWN
    state = coordinator_pb2.OperationState.Name(ended.state).removeprefix("OPERATION_STATE_")
    s = _samples(text)
    unknown = {
        dict(labels)["reason"]: value
        for (name, labels), value in s.items()
        if name == "turnwire_operations_unknown"
    }
    assert unknown == {ended.error.reason: 1}
    assert _value(s, "turnwire_operations_unknown", state=state, reason=ended.error.reason) == 1
    assert _value(s, "turnwire_operations", state=state, execution="UNKNOWN") == 1
    assert _value(s, "turnwire_operations_finished_total", state=state, execution="UNKNOWN") == 1
    assert _value(s, "turnwire_dispatch_unknown_total") == 1
    assert _value(s, "turnwire_reconciled_without_resend_total") == 0
