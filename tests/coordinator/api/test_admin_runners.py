"""AdminService's runner set calls against a real coordinator and real runners
(PROTOCOL.md §11 M1-M8): AddRunner, RemoveRunner, ListRunners; SQLite journal."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest

from coordinator_svc.api.runner_set import RunnerFlagConflict
from coordinator_svc.config import parse_runner_spec
from tests.coordinator.api.admin_rig import STEP, A, Deployment, Q, deployment
from tests.coordinator.api.harness import bearer, turn, typed_error
from turnwire.common.v1 import turn_pb2

pytestmark = pytest.mark.timeout(120)


async def start_extra_runner(rig: Deployment, name: str) -> str:
    """A runner the coordinator was not started with (no --runner flag for it)."""
    return (await rig.start_runner(name)).address


async def runners(rig: Deployment) -> list[A.Runner]:
    reply = await rig.admin.ListRunners(A.ListRunnersRequest(), metadata=rig.admin_md, timeout=STEP)
    return list(reply.runners)


def membership(listed: list[A.Runner]) -> list[tuple[str, str, str, int, bool]]:
    return [(r.name, r.address, r.pools[0], r.generation, r.drained) for r in listed]


async def call(rig: Deployment, method: str, request: Any, token: str | None = None) -> Any:
    metadata = bearer(token) if token is not None else rig.admin_md
    return await getattr(rig.admin, method)(request, metadata=metadata, timeout=STEP)


def add(name: str, address: str, **fields: Any) -> A.AddRunnerRequest:
    return A.AddRunnerRequest(runner=name, address=address, **fields)


def remove(name: str, **fields: Any) -> A.RemoveRunnerRequest:
    return A.RemoveRunnerRequest(runner=name, reason=fields.pop("reason", "retired"), **fields)


def drain(name: str) -> A.DrainRunnerRequest:
    return A.DrainRunnerRequest(runner=name, reason="retire")


@pytest.mark.rule("M2", "M3", "M5", "M7", "M8")
def test_a_runner_added_and_one_removed_change_what_the_coordinator_uses(
    tmp_path: Path,
) -> None:
    """M2, M3, M5, M7, M8: r2 added at run time takes the turns while r1 is drained;
    r1 removed once drained and idle (again: a replay); a restart with both flags
    keeps r1 removed (the journal wins) and r2 as it is; r1 added back is generation 3."""

    async def scenario() -> None:
        async with deployment(tmp_path, runners=("r1",)) as rig:
            await rig.start_coordinator()
            (r1,) = await runners(rig)
            assert (r1.name, r1.generation, r1.added_by, r1.bound_turns) == ("r1", 1, "--runner", 0)
            assert list(r1.kinds) == [turn_pb2.TURN_KIND_WRITABLE, turn_pb2.TURN_KIND_READ_ONLY]

            address = await start_extra_runner(rig, "r2")
            reply = await call(rig, "AddRunner", add("r2", address, reason="more capacity"))
            assert not reply.replayed and reply.runner.generation == 1
            assert (reply.runner.added_by, reply.runner.added_reason) == ("ops", "more capacity")
            assert (await call(rig, "AddRunner", add("r2", address))).replayed
            await call(rig, "DrainRunner", drain("r1"))
            ops = [await rig.submit(f"k{i}") for i in range(3)]
            ended = [await rig.terminal(op.operation_id) for op in ops]
            assert {(op.state, op.runner) for op in ended} == {(Q.OPERATION_STATE_SUCCEEDED, "r2")}

            removed = await call(rig, "RemoveRunner", remove("r1"))
            assert not removed.replayed and removed.removal.sequence == 2
            assert removed.removal.action == A.MEMBERSHIP_ACTION_REMOVED
            assert not removed.removal.forced and removed.removal.recorded_by == "ops"
            assert [r.name for r in await runners(rig)] == ["r2"]
            assert (await call(rig, "RemoveRunner", remove("r1"))).replayed

            await rig.stop_coordinator()
            await rig.start_coordinator()  # flags for r1 and r2 now
            assert [(r.name, r.generation, r.drained) for r in await runners(rig)] == [
                ("r2", 1, False)
            ]
            back = await call(rig, "AddRunner", add("r1", rig.runners["r1"].address))
            assert back.runner.generation == 3 and not back.runner.drained
            assert [r.name for r in await runners(rig)] == ["r1", "r2"]

    asyncio.run(scenario())


@pytest.mark.rule("M2", "M3")
def test_membership_refusals_are_typed_and_change_nothing(tmp_path: Path) -> None:
    """M2, M3, §7: no admin scope, bad fields, plaintext off loopback, a name taken
    with other fields, an unknown name, a runner not drained or still with a turn:
    each refused with its typed reason, and the set stays as it was."""

    async def scenario() -> None:
        async with deployment(tmp_path, runners=("r1",)) as rig:
            await rig.start_coordinator()
            address = rig.runners["r1"].address
            before = membership(await runners(rig))
            cases: list[tuple[str, Any, grpc.StatusCode, str, dict[str, str]]] = [
                ("AddRunner", add("r2", "127.0.0.1"), grpc.StatusCode.INVALID_ARGUMENT,
                 "ARGUMENT_INVALID", {"field": "address"}),
                ("AddRunner", add("r 2", address), grpc.StatusCode.INVALID_ARGUMENT,
                 "ARGUMENT_INVALID", {"field": "runner"}),
                ("AddRunner", add("r2", address, kinds=[turn_pb2.TURN_KIND_UNSPECIFIED]),
                 grpc.StatusCode.INVALID_ARGUMENT, "ARGUMENT_INVALID", {"field": "kinds"}),
                ("AddRunner", add("r2", address, pool="a;b"), grpc.StatusCode.INVALID_ARGUMENT,
                 "ARGUMENT_INVALID", {"field": "pool"}),
                ("AddRunner", add("r2", "10.1.2.3:7000"), grpc.StatusCode.INVALID_ARGUMENT,
                 "ARGUMENT_INVALID", {"field": "address"}),
                ("AddRunner", add("r1", "127.0.0.1:9"), grpc.StatusCode.ALREADY_EXISTS,
                 "RUNNER_CONFLICT", {"runner": "r1", "address": address, "generation": "1"}),
                ("RemoveRunner", remove("r9"), grpc.StatusCode.NOT_FOUND,
                 "RUNNER_NOT_FOUND", {"runner": "r9"}),
                ("RemoveRunner", remove("r1", reason=""), grpc.StatusCode.INVALID_ARGUMENT,
                 "ARGUMENT_INVALID", {"field": "reason"}),
                ("RemoveRunner", remove("r1"), grpc.StatusCode.FAILED_PRECONDITION,
                 "RUNNER_NOT_DRAINED", {"runner": "r1"}),
                ("DrainRunner", drain("r9"), grpc.StatusCode.NOT_FOUND,
                 "RUNNER_NOT_FOUND", {"runner": "r9"}),
            ]  # fmt: skip
            for method, request, code, reason, metadata in cases:
                error = await typed_error(call(rig, method, request))
                assert (error.code, error.reason) == (code, reason), (method, request)
                assert metadata.items() <= error.metadata.items(), (method, error.metadata)
            tenant = await typed_error(call(rig, "AddRunner", add("r2", address), rig.tenant_token))
            assert tenant.reason == "SCOPE_MISSING"
            assert membership(await runners(rig)) == before

            slow = turn(
                model=turn_pb2.ModelRef(
                    provider="builtin", name="echo", parameters={"sleep_ms": "20000"}
                )
            )
            reply = await rig.turns.SubmitTurn(
                Q.SubmitTurnRequest(idempotency_key="slow", turn=slow),
                metadata=rig.tenant,
                timeout=STEP,
            )
            op_id = reply.operation.operation_id
            await rig.until(op_id, lambda op: op.state == Q.OPERATION_STATE_RUNNING)
            await call(rig, "DrainRunner", drain("r1"))
            error = await typed_error(call(rig, "RemoveRunner", remove("r1")))
            assert (error.reason, error.metadata["turns"]) == ("RUNNER_HAS_TURNS", "1")
            assert [r.bound_turns for r in await runners(rig)] == [1]

            forced = await call(rig, "RemoveRunner", remove("r1", force=True, reason="host died"))
            assert forced.removal.forced and forced.removal.bound_turns == 1
            ended = await rig.terminal(op_id)
            assert (ended.state, ended.error.reason) == (
                Q.OPERATION_STATE_TIMED_OUT,
                "RUNNER_REMOVED",
            )
            assert ended.execution in (turn_pb2.EXECUTION_STARTED, turn_pb2.EXECUTION_UNKNOWN)
            assert ended.attempt_count == 1 and ended.runner == "r1"
            assert await runners(rig) == []

    asyncio.run(scenario())


@pytest.mark.rule("M8")
def test_a_flag_that_disagrees_with_the_journal_stops_the_start(tmp_path: Path) -> None:
    """M8: --runner r1 at another address than the journal's member r1 refuses the
    start (naming both and the fix) and records nothing."""

    async def scenario() -> None:
        async with deployment(tmp_path, runners=("r1",)) as rig:
            await rig.start_coordinator()
            await rig.stop_coordinator()
            moved = rig.config(runners=(parse_runner_spec("r1=127.0.0.1:9"),))
            with pytest.raises(RunnerFlagConflict) as refused:
                await rig.stack.start_coordinator(moved)
            text = str(refused.value)
            assert "127.0.0.1:9" in text and rig.runners["r1"].address in text
            assert "turnwire admin runners" in text
            await rig.start_coordinator()
            (r1,) = await runners(rig)
            assert (r1.address, r1.generation) == (rig.runners["r1"].address, 1)

    asyncio.run(scenario())
