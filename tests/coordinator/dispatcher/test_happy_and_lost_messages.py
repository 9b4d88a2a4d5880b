"""The dispatcher against real runners: the happy path and lost messages
(issue #3 "done when": C2, C4, C7, C8, C10; executions counted by the ledger)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coordinator_svc.core.events import RunnerIdentity
from coordinator_svc.core.model import AttemptOutcome, Execution, OpState
from coordinator_svc.dispatcher import utc_now
from coordinator_svc.storage import FakeJournal
from tests.support.fault_interceptor import DROP_REQUEST, DROP_RESPONSE, Fault, FaultInterceptor
from turnwire.testing.dispatcher_rig import Rig, per_operation_rpcs, sqlite_journal


@pytest.mark.rule("C2a", "C4", "C10")
def test_happy_path_succeeds_once_with_few_commits_and_calls(tmp_path: Path) -> None:
    """C2a/C4/C10: happy path: one execution, <= 4 commits, and 2 per-operation runner
    calls (Dispatch, Release): a first attempt to a runner the live watch knows goes
    without a preflight."""

    async def scenario() -> None:
        rig = Rig(tmp_path, sqlite_journal(tmp_path / "journal.db"))
        try:
            await rig.start_runner()
            dispatcher = rig.make_dispatcher(status_poll=60.0)
            await dispatcher.start()
            await rig.watching("r1")
            op_id = await rig.submit({"output": "hi"})
            record = await rig.terminal(op_id)
            assert record.state is OpState.SUCCEEDED
            assert record.execution is Execution.STARTED
            assert record.attempt_count == 1 and record.result
            assert rig.starts()[op_id] == 1
            assert rig.journal.commits <= 4
            await rig.wait_for(op_id, lambda r: r.released)
            row = await rig.runner_row("r1", op_id)
            for _ in range(100):  # the Release is sent right after the terminal commit
                if row.operation.released:
                    break
                await asyncio.sleep(0.02)
                row = await rig.runner_row("r1", op_id)
            assert row.operation.released
            assert per_operation_rpcs(dispatcher) == 2
            assert dispatcher.metrics.rpc_calls["GetOperationStatus"] == 0
            attempts = await rig.journal.attempts(op_id)
            assert [a.outcome for a in attempts] == [AttemptOutcome.ACCEPTED]
            events = await rig.journal.events(op_id, 0, 100)
            assert events[0].to_state is OpState.QUEUED
            assert events[-1].to_state is OpState.SUCCEEDED
            # Issue 10: the runner held its reply until the turn settled: the result
            # came on the Dispatch reply, DISPATCHING -> SUCCEEDED in one commit.
            assert events[-1].detail.startswith("dispatch: ")
            assert [e.to_state for e in events] == [
                OpState.QUEUED,
                OpState.DISPATCHING,
                OpState.SUCCEEDED,
            ]
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C7", "C8")
def test_lost_dispatch_response_is_reconciled_without_a_second_dispatch(tmp_path: Path) -> None:
    """C7/C8: lost Dispatch reply: found present and adopted; one Dispatch, one execution."""

    async def scenario() -> None:
        faults = FaultInterceptor(Fault("Dispatch", DROP_RESPONSE))
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            await rig.start_runner()
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            op_id = await rig.submit({"sleep_ms": "50"})
            record = await rig.terminal(op_id)
            assert record.state is OpState.SUCCEEDED
            assert record.attempt_count == 1
            assert dispatcher.metrics.rpc_calls["Dispatch"] == 1
            assert dispatcher.metrics.ambiguous == 1
            assert dispatcher.metrics.reconciled_without_resend == 1
            assert rig.starts()[op_id] == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C8")
def test_lost_dispatch_request_is_replayed_exactly_once(tmp_path: Path) -> None:
    """C8: lost Dispatch request: absent on the same incarnation, replayed once; one execution."""

    async def scenario() -> None:
        faults = FaultInterceptor(Fault("Dispatch", DROP_REQUEST))
        rig = Rig(tmp_path, sqlite_journal(tmp_path / "journal.db"), interceptors=faults.all())
        try:
            runner = await rig.start_runner()
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            op_id = await rig.submit()
            record = await rig.terminal(op_id)
            assert record.state is OpState.SUCCEEDED
            assert record.attempt_count == 2
            assert dispatcher.metrics.replays == 1
            assert rig.starts()[op_id] == 1
            attempts = await rig.journal.attempts(op_id)
            assert [a.outcome for a in attempts] == [
                AttemptOutcome.UNKNOWN,
                AttemptOutcome.ACCEPTED,
            ]
            assert {a.incarnation_id for a in attempts} == {runner.incarnation_id}
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C2")
def test_operations_due_together_share_batched_preflights(tmp_path: Path) -> None:
    """C2: operations due together share BatchGetOperationStatus; each runs exactly once."""

    async def scenario() -> None:
        rig = Rig(tmp_path, sqlite_journal(tmp_path / "journal.db"))
        try:
            await rig.start_runner(slots=64)
            dispatcher = rig.make_dispatcher(status_poll=60.0)
            op_ids = [await rig.submit({"sleep_ms": "5"}) for _ in range(30)]
            await dispatcher.start()  # all 30 are due in the first scan
            for op_id in op_ids:
                assert (await rig.terminal(op_id)).state is OpState.SUCCEEDED
            calls = dispatcher.metrics.rpc_calls
            assert calls["BatchGetOperationStatus"] >= 1
            assert calls["BatchGetOperationStatus"] + calls["GetOperationStatus"] < len(op_ids)
            assert calls["Dispatch"] == len(op_ids)
            starts = rig.starts()
            assert all(starts[op_id] == 1 for op_id in op_ids)
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C2a", "C5", "C6")
def test_first_attempt_with_a_stale_identity_is_refused_and_runs_once_after_a_preflight(
    tmp_path: Path,
) -> None:
    """C2a + C5/C6: a never-sent first attempt bound to an incarnation the runner no
    longer has (it restarted after the watch learned it) is refused INCARNATION_MISMATCH
    without running; the turn waits QUEUED, asks first the next time, and runs once."""

    async def scenario() -> None:
        rig = Rig(tmp_path, sqlite_journal(tmp_path / "journal.db"))
        try:
            runner = await rig.start_runner()
            dispatcher = rig.make_dispatcher(status_poll=60.0)
            await dispatcher.start()
            known = await rig.watching("r1")
            # What the watch would hold for a moment after a restart it has not seen yet.
            stale = RunnerIdentity("f" * 32, known.store_id)
            dispatcher.runner_memory.identified("r1", stale, utc_now())
            op_id = await rig.submit({"output": "hi"})
            record = await rig.terminal(op_id)
            assert record.state is OpState.SUCCEEDED
            assert record.incarnation_id == runner.incarnation_id
            assert rig.starts()[op_id] == 1
            attempts = await rig.journal.attempts(op_id)
            assert [(a.outcome, a.incarnation_id) for a in attempts] == [
                (AttemptOutcome.REFUSED, stale.incarnation_id),
                (AttemptOutcome.ACCEPTED, runner.incarnation_id),
            ]
            assert attempts[0].detail.startswith("INCARNATION_MISMATCH")
            assert dispatcher.metrics.rpc_calls["GetOperationStatus"] >= 1
        finally:
            await rig.close()

    asyncio.run(scenario())
