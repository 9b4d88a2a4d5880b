"""AdminService against a real coordinator over real gRPC (PROTOCOL.md §10, docs/ADMIN_API.md).

Each test starts in-process echo runners and a coordinator on a real SQLite
journal file, both on 127.0.0.1:0 (``admin_rig``). An UNKNOWN turn is made by
losing the Dispatch reply and silencing the runner until the reconcile
deadline (C7, C8): the turn ends TIMED_OUT, UNKNOWN.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.coordinator.api.admin_rig import STEP, A, Q, deployment, unknown_turn
from tests.coordinator.api.harness import typed_error
from turnwire.common.v1 import turn_pb2


@pytest.mark.rule("V1", "V2", "V3", "V4")
def test_an_operator_verdict_is_shown_on_get_operation_and_rewrites_no_history(
    tmp_path: Path,
) -> None:
    """§10 V1-V4: the verdict on an UNKNOWN turn is recorded (who, why, when) and shown
    on the tenant's GetOperation; state, execution and events stay as recorded; the
    same verdict again is a replay, another one is VERDICT_CONFLICT."""

    async def scenario() -> None:
        async with deployment(tmp_path) as rig:
            ended = await unknown_turn(rig)
            op_id = ended.operation_id
            before = await rig.describe(op_id)
            queue = await rig.admin.ListAmbiguousOperations(
                A.ListAmbiguousOperationsRequest(), metadata=rig.admin_md, timeout=STEP
            )
            assert [e.operation.operation.operation_id for e in queue.operations] == [op_id]
            evidence = queue.operations[0]
            assert evidence.operation.principal == "alice"
            (attempt,) = evidence.attempts
            runner = rig.runners["r1"]
            assert (attempt.number, attempt.runner) == (1, "r1")
            assert (attempt.incarnation_id, attempt.store_id) == (
                runner.incarnation_id,
                runner.store_id,
            )
            assert attempt.outcome == A.ATTEMPT_OUTCOME_UNKNOWN
            assert evidence.events[-1].reason == ended.error.reason
            assert not ended.HasField("verdict")

            reply = await rig.admin.RecordVerdict(
                A.RecordVerdictRequest(
                    operation_id=op_id,
                    verdict=Q.VERDICT_NOT_EXECUTED,
                    reason="no charge in billing",
                ),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            assert not reply.replayed
            shown = await rig.get(op_id)  # the tenant's own view
            assert shown.verdict.verdict == Q.VERDICT_NOT_EXECUTED
            assert (shown.verdict.by, shown.verdict.reason) == ("ops", "no charge in billing")
            assert shown.verdict.at.seconds > 0
            assert (shown.state, shown.execution) == (ended.state, ended.execution)
            assert shown.last_event_sequence == ended.last_event_sequence
            after = await rig.describe(op_id)
            assert list(after.events) == list(before.events)
            assert list(after.attempts) == list(before.attempts)
            assert [v.by for v in after.verdicts] == ["ops"]

            again = await rig.admin.RecordVerdict(
                A.RecordVerdictRequest(
                    operation_id=op_id, verdict=Q.VERDICT_NOT_EXECUTED, reason="asked twice"
                ),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            assert again.replayed
            assert again.operation.operation.verdict.reason == "no charge in billing"
            other = rig.admin.RecordVerdict(
                A.RecordVerdictRequest(
                    operation_id=op_id, verdict=Q.VERDICT_EXECUTED, reason="changed my mind"
                ),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            refused = await typed_error(other)
            assert (refused.code, refused.reason) == (
                grpc.StatusCode.FAILED_PRECONDITION,
                "VERDICT_CONFLICT",
            )
            assert refused.metadata["recorded"] == "NOT_EXECUTED"
            assert [v.reason for v in (await rig.describe(op_id)).verdicts] == [
                "no charge in billing"
            ]
            undecided = await rig.admin.ListAmbiguousOperations(
                A.ListAmbiguousOperationsRequest(), metadata=rig.admin_md, timeout=STEP
            )
            assert list(undecided.operations) == []
            decided = await rig.admin.ListAmbiguousOperations(
                A.ListAmbiguousOperationsRequest(include_decided=True),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            assert [e.operation.operation.operation_id for e in decided.operations] == [op_id]

    asyncio.run(scenario())


@pytest.mark.rule("V5", "V6", "V7")
def test_requeue_only_what_is_proven_not_run_and_only_once(tmp_path: Path) -> None:
    """§10 V5-V7: UNKNOWN without a verdict, STARTED and a live turn are refused typed;
    after a NOT_EXECUTED verdict the turn is requeued as a new linked operation that
    runs; asking again returns that same operation."""

    async def scenario() -> None:
        async with deployment(tmp_path) as rig:
            ended = await unknown_turn(rig)
            op_id = ended.operation_id
            done = await rig.terminal((await rig.submit("runs")).operation_id)
            assert (done.state, done.execution) == (
                Q.OPERATION_STATE_SUCCEEDED,
                turn_pb2.EXECUTION_STARTED,
            )

            async def refused(target: str) -> Any:
                call = rig.admin.RequeueOperation(
                    A.RequeueOperationRequest(operation_id=target, reason="retry"),
                    metadata=rig.admin_md,
                    timeout=STEP,
                )
                return await typed_error(call)

            unknown = await refused(op_id)
            assert (unknown.code, unknown.reason) == (
                grpc.StatusCode.FAILED_PRECONDITION,
                "REQUEUE_NOT_ALLOWED",
            )
            assert unknown.metadata["execution"] == "UNKNOWN"
            started = await refused(done.operation_id)
            assert (started.reason, started.metadata["execution"]) == (
                "REQUEUE_NOT_ALLOWED",
                "STARTED",
            )

            await rig.admin.RecordVerdict(
                A.RecordVerdictRequest(
                    operation_id=op_id, verdict=Q.VERDICT_NOT_EXECUTED, reason="not billed"
                ),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            first = await rig.admin.RequeueOperation(
                A.RequeueOperationRequest(operation_id=op_id, reason="customer asked"),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            new_id = first.operation.operation.operation_id
            assert not first.replayed and new_id != op_id
            assert first.operation.principal == "alice"
            assert first.operation.operation.requeued_from == op_id
            assert first.original.operation.requeued_as == new_id
            second = await rig.admin.RequeueOperation(
                A.RequeueOperationRequest(operation_id=op_id, reason="clicked twice"),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            assert second.replayed and second.operation.operation.operation_id == new_id

            ran = await rig.terminal(new_id)  # the tenant sees it as its own
            assert (ran.state, ran.execution) == (
                Q.OPERATION_STATE_SUCCEEDED,
                turn_pb2.EXECUTION_STARTED,
            )
            assert ran.requeued_from == op_id
            assert ran.envelope_digest != ended.envelope_digest  # only its operation_id differs
            original = await rig.get(op_id)
            assert original.requeued_as == new_id
            assert (original.state, original.execution) == (ended.state, ended.execution)
            first_event = (await rig.describe(new_id)).events[0]
            assert first_event.detail == f"requeued from {op_id} by ops: customer asked"

            await rig.admin.DrainRunner(  # the next turn stays QUEUED: live, not terminal
                A.DrainRunnerRequest(runner="r1", reason="hold"),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            live = await rig.submit("live")
            pending = await refused(live.operation_id)
            assert (pending.reason, pending.metadata["state"]) == (
                "OPERATION_NOT_TERMINAL",
                "QUEUED",
            )
            # Cancelled before any send: NOT_STARTED is proof enough, no verdict needed.
            cancelled = await rig.turns.CancelOperation(
                Q.CancelOperationRequest(operation_id=live.operation_id),
                metadata=rig.tenant,
                timeout=STEP,
            )
            assert cancelled.operation.execution == turn_pb2.EXECUTION_NOT_STARTED
            again = await rig.admin.RequeueOperation(
                A.RequeueOperationRequest(
                    operation_id=live.operation_id, reason="cancelled by mistake"
                ),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            assert (
                not again.replayed and again.operation.operation.state == Q.OPERATION_STATE_QUEUED
            )
            await rig.admin.UndrainRunner(
                A.UndrainRunnerRequest(runner="r1"), metadata=rig.admin_md, timeout=STEP
            )
            rerun = await rig.terminal(again.operation.operation.operation_id)
            assert rerun.state == Q.OPERATION_STATE_SUCCEEDED

    asyncio.run(scenario())


@pytest.mark.rule("V8")
def test_a_drained_runner_gets_no_new_turns_even_after_a_restart(tmp_path: Path) -> None:
    """§10 V8: with r1 drained every new turn goes to r2; ListRunners says so; the
    drain is in the journal, so a restarted coordinator honours it; undrain ends it."""

    async def scenario() -> None:
        async with deployment(tmp_path, runners=("r1", "r2")) as rig:
            await rig.start_coordinator()
            drained = await rig.admin.DrainRunner(
                A.DrainRunnerRequest(runner="r1", reason="disk swap"),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            assert drained.runner.drained and not drained.replayed
            assert (drained.runner.drained_by, drained.runner.drain_reason) == ("ops", "disk swap")
            ops = [await rig.submit(f"k{i}") for i in range(4)]
            ended = [await rig.terminal(op.operation_id) for op in ops]
            assert {op.runner for op in ended} == {"r2"}
            assert {op.state for op in ended} == {Q.OPERATION_STATE_SUCCEEDED}

            await rig.stop_coordinator()
            await rig.start_coordinator()
            listed = await rig.admin.ListRunners(
                A.ListRunnersRequest(), metadata=rig.admin_md, timeout=STEP
            )
            assert [(r.name, r.drained) for r in listed.runners] == [("r1", True), ("r2", False)]
            after_restart = await rig.terminal((await rig.submit("after-restart")).operation_id)
            assert after_restart.runner == "r2"
            again = await rig.admin.DrainRunner(
                A.DrainRunnerRequest(runner="r1", reason="other"),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            assert again.replayed and again.runner.drain_reason == "disk swap"

            await rig.admin.DrainRunner(
                A.DrainRunnerRequest(runner="r2", reason="both"),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            waiting = await rig.submit("waits")
            await asyncio.sleep(0.5)
            held = await rig.get(waiting.operation_id)
            assert held.state == Q.OPERATION_STATE_QUEUED and held.attempt_count == 0
            assert "drained by an operator" in held.waiting_for
            undrained = await rig.admin.UndrainRunner(
                A.UndrainRunnerRequest(runner="r1"), metadata=rig.admin_md, timeout=STEP
            )
            assert not undrained.runner.drained and not undrained.replayed
            resumed = await rig.terminal(waiting.operation_id)
            assert (resumed.state, resumed.runner) == (Q.OPERATION_STATE_SUCCEEDED, "r1")
            listed = await rig.admin.ListRunners(
                A.ListRunnersRequest(), metadata=rig.admin_md, timeout=STEP
            )
            r1 = listed.runners[0]
            assert (r1.incarnation_id, r1.store_id) == (
                rig.runners["r1"].incarnation_id,
                rig.runners["r1"].store_id,
            )
            assert (
                r1.answering and r1.writable_slots == 4 and r1.address == rig.runners["r1"].address
            )

    asyncio.run(scenario())


def test_only_admin_tokens_and_good_arguments_change_anything(tmp_path: Path) -> None:
    """Every AdminService call needs the admin scope (PERMISSION_DENIED, SCOPE_MISSING
    otherwise); malformed or impossible requests are refused typed and store nothing."""

    async def scenario() -> None:
        async with deployment(tmp_path) as rig:
            await rig.start_coordinator()
            done = await rig.terminal((await rig.submit("ok")).operation_id)
            op_id = done.operation_id
            calls: list[tuple[str, Any]] = [
                ("ListOperations", A.AdminServiceListOperationsRequest()),
                ("DescribeOperation", A.DescribeOperationRequest(operation_id=op_id)),
                ("ListAmbiguousOperations", A.ListAmbiguousOperationsRequest()),
                (
                    "RecordVerdict",
                    A.RecordVerdictRequest(operation_id=op_id, verdict=1, reason="x"),
                ),
                ("RequeueOperation", A.RequeueOperationRequest(operation_id=op_id, reason="x")),
                ("DrainRunner", A.DrainRunnerRequest(runner="r1", reason="x")),
                ("UndrainRunner", A.UndrainRunnerRequest(runner="r1")),
                ("ListRunners", A.ListRunnersRequest()),
            ]
            for method, request in calls:
                denied = await typed_error(
                    getattr(rig.admin, method)(request, metadata=rig.tenant, timeout=STEP)
                )
                assert (denied.code, denied.reason, denied.metadata["scope"]) == (
                    grpc.StatusCode.PERMISSION_DENIED,
                    "SCOPE_MISSING",
                    "admin",
                ), method
                anonymous = await typed_error(getattr(rig.admin, method)(request, timeout=STEP))
                assert anonymous.code == grpc.StatusCode.UNAUTHENTICATED, method

            INVALID, FAILED, NOT_FOUND = (
                grpc.StatusCode.INVALID_ARGUMENT,
                grpc.StatusCode.FAILED_PRECONDITION,
                grpc.StatusCode.NOT_FOUND,
            )
            bad: list[tuple[str, Any, tuple[Any, str, str]]] = [
                (
                    "RecordVerdict",
                    A.RecordVerdictRequest(operation_id=op_id, reason="x"),
                    (INVALID, "ARGUMENT_INVALID", "verdict"),
                ),
                (
                    "RecordVerdict",
                    A.RecordVerdictRequest(operation_id=op_id, verdict=7, reason="x"),
                    (INVALID, "ARGUMENT_INVALID", "verdict"),
                ),
                (
                    "RecordVerdict",
                    A.RecordVerdictRequest(operation_id=op_id, verdict=1, reason=" "),
                    (INVALID, "ARGUMENT_INVALID", "reason"),
                ),
                (
                    "RecordVerdict",
                    A.RecordVerdictRequest(operation_id=op_id, verdict=1, reason="a\x00b"),
                    (INVALID, "ARGUMENT_INVALID", "reason"),
                ),
                (
                    "RecordVerdict",
                    A.RecordVerdictRequest(operation_id="", verdict=1, reason="x"),
                    (INVALID, "ARGUMENT_INVALID", "operation_id"),
                ),
                (
                    "RecordVerdict",
                    A.RecordVerdictRequest(operation_id="nope", verdict=1, reason="x"),
                    (NOT_FOUND, "OPERATION_NOT_FOUND", ""),
                ),
                (
                    "RecordVerdict",
                    A.RecordVerdictRequest(operation_id=op_id, verdict=1, reason="x"),
                    (FAILED, "OPERATION_NOT_AMBIGUOUS", ""),
                ),
                (
                    "RequeueOperation",
                    A.RequeueOperationRequest(operation_id=op_id, reason=""),
                    (INVALID, "ARGUMENT_INVALID", "reason"),
                ),
                (
                    "DrainRunner",
                    A.DrainRunnerRequest(runner="r9", reason="x"),
                    (NOT_FOUND, "RUNNER_NOT_FOUND", ""),
                ),
                (
                    "DrainRunner",
                    A.DrainRunnerRequest(runner="r1", reason="x" * 2001),
                    (INVALID, "ARGUMENT_INVALID", "reason"),
                ),
                (
                    "UndrainRunner",
                    A.UndrainRunnerRequest(runner=""),
                    (INVALID, "ARGUMENT_INVALID", "runner"),
                ),
                (
                    "ListOperations",
                    A.AdminServiceListOperationsRequest(states=[0]),
                    (INVALID, "ARGUMENT_INVALID", "states"),
                ),
                (
                    "ListOperations",
                    A.AdminServiceListOperationsRequest(executions=[9]),
                    (INVALID, "ARGUMENT_INVALID", "executions"),
                ),
                (
                    "ListOperations",
                    A.AdminServiceListOperationsRequest(page_token="garbage"),
                    (INVALID, "PAGE_TOKEN_INVALID", "page_token"),
                ),
                (
                    "DescribeOperation",
                    A.DescribeOperationRequest(operation_id="x" * 256),
                    (INVALID, "ARGUMENT_INVALID", "operation_id"),
                ),
            ]
            for method, request, (code, reason, field_name) in bad:
                error = await typed_error(
                    getattr(rig.admin, method)(request, metadata=rig.admin_md, timeout=STEP)
                )
                assert (error.code, error.reason) == (code, reason), (method, request)
                assert error.metadata.get("field", "") == field_name, (method, request)

            # Nothing changed: no verdict, no drain, no new operation.
            assert list((await rig.describe(op_id)).verdicts) == []
            listed = await rig.admin.ListRunners(
                A.ListRunnersRequest(), metadata=rig.admin_md, timeout=STEP
            )
            assert [r.drained for r in listed.runners] == [False]
            everything = await rig.admin.ListOperations(
                A.AdminServiceListOperationsRequest(), metadata=rig.admin_md, timeout=STEP
            )
            assert [v.operation.operation_id for v in everything.operations] == [op_id]

            # A tenant's page token is no admin token, and the reverse; paging works.
            for key in ("p2", "p3"):
                await rig.submit(key)
            page = await rig.admin.ListOperations(
                A.AdminServiceListOperationsRequest(page_size=2),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            assert len(page.operations) == 2 and page.next_page_token
            rest = await rig.admin.ListOperations(
                A.AdminServiceListOperationsRequest(page_size=2, page_token=page.next_page_token),
                metadata=rig.admin_md,
                timeout=STEP,
            )
            assert len(rest.operations) == 1 and not rest.next_page_token
            other_filter = await typed_error(
                rig.admin.ListOperations(
                    A.AdminServiceListOperationsRequest(
                        page_token=page.next_page_token, principal="alice"
                    ),
                    metadata=rig.admin_md,
                    timeout=STEP,
                )
            )
            assert other_filter.reason == "PAGE_TOKEN_INVALID"

            health = health_pb2_grpc.HealthStub(rig.channel)
            status = await health.Check(
                health_pb2.HealthCheckRequest(service="turnwire.coordinator.v1.AdminService"),
                timeout=STEP,
            )
            assert status.status == health_pb2.HealthCheckResponse.SERVING
            reflection = reflection_pb2_grpc.ServerReflectionStub(rig.channel)

            async def ask() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
                yield reflection_pb2.ServerReflectionRequest(list_services="")

            replies = [r async for r in reflection.ServerReflectionInfo(ask(), timeout=STEP)]
            names = {s.name for s in replies[0].list_services_response.service}
            assert {
                "turnwire.coordinator.v1.AdminService",
                "turnwire.coordinator.v1.TurnService",
            } <= names

    asyncio.run(scenario())
