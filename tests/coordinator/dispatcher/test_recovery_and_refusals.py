"""Coordinator restart (C12) on a real SQLite journal, definite refusals (C6) and
the SAFE policy, with real runners and the metered ledger."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from coordinator_svc.core.decide import decide
from coordinator_svc.core.decision import Context
from coordinator_svc.core.events import PreflightAnswer
from coordinator_svc.core.model import (
    AttemptOutcome,
    Execution,
    OperationRecord,
    OpState,
    ReplayPolicy,
)
from coordinator_svc.dispatcher import utc_now
from coordinator_svc.ports import Journal, JournalUnavailable
from coordinator_svc.storage import FakeJournal
from runner_svc.app import RunningRunner
from tests.support.fault_interceptor import DROP_REQUEST, DROP_RESPONSE, Fault, FaultInterceptor
from turnwire.common.v1 import turn_pb2
from turnwire.ids import sha256_hex, stamp_now
from turnwire.runner.v1 import runner_pb2, runner_pb2_grpc
from turnwire.secure_channels import runner_aio_channel
from turnwire.testing.dispatcher_rig import Rig, new_operation, sqlite_journal


async def write_ahead_only(journal: Journal, runner: RunningRunner) -> OperationRecord:
    """A first coordinator that committed DISPATCHING (C4) and then stopped."""
    record, event = new_operation()
    stored, _ = await journal.submit(record, event)
    absent = PreflightAnswer("r1", runner.incarnation_id, runner.store_id, True, False, None, 0)
    decision = decide(stored, absent, Context(now=utc_now(), replica_id="first-replica"))
    assert decision.change is not None
    dispatching = await journal.commit(decision.change)
    assert dispatching.state is OpState.DISPATCHING
    return dispatching


async def send_dispatch(rig: Rig, runner: RunningRunner, record: OperationRecord) -> None:
    """The first coordinator's Dispatch that left just before it died."""
    async with runner_aio_channel(rig.credentials, runner.address) as channel:
        await runner_pb2_grpc.RunnerServiceStub(channel).Dispatch(
            runner_pb2.DispatchRequest(
                operation_id=record.operation_id,
                envelope=record.envelope,
                envelope_digest=record.envelope_digest,
                expected_incarnation_id=runner.incarnation_id,
                fencing_token=record.fencing_token,
                attempt=1,
                dispatch_stamp=stamp_now(),
            ),
            timeout=3.0,
        )


@pytest.mark.rule("C12", "C8")
def test_restart_before_the_send_replays_once_after_an_absent_preflight(tmp_path: Path) -> None:
    """C12/C8: restart after the write-ahead, before the send: absent, replayed once."""

    async def scenario() -> None:
        db = tmp_path / "journal.db"
        rig = Rig(tmp_path, sqlite_journal(db))
        try:
            runner = await rig.start_runner()
            stopped = await write_ahead_only(rig.journal, runner)
            await rig.journal.close()
            rig.journal = sqlite_journal(db)  # the second coordinator opens the same file
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            record = await rig.terminal(stopped.operation_id)
            assert record.state is OpState.SUCCEEDED
            assert record.attempt_count == 2
            events = await rig.journal.events(stopped.operation_id, 0, 100)
            assert [e.to_state for e in events][:3] == [
                OpState.QUEUED,
                OpState.DISPATCHING,
                OpState.DISPATCH_UNKNOWN,
            ]
            attempts = await rig.journal.attempts(stopped.operation_id)
            assert attempts[0].outcome is AttemptOutcome.UNKNOWN
            assert rig.starts()[stopped.operation_id] == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C12", "C8")
def test_restart_after_the_send_adopts_without_resending(tmp_path: Path) -> None:
    """C12/C8: restart after the send: present, adopted, no Dispatch of its own."""

    async def scenario() -> None:
        db = tmp_path / "journal.db"
        rig = Rig(tmp_path, sqlite_journal(db))
        try:
            runner = await rig.start_runner()
            stopped = await write_ahead_only(rig.journal, runner)
            await send_dispatch(rig, runner, stopped)
            await rig.journal.close()
            rig.journal = sqlite_journal(db)
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            record = await rig.terminal(stopped.operation_id)
            assert record.state is OpState.SUCCEEDED and record.attempt_count == 1
            assert dispatcher.metrics.rpc_calls["Dispatch"] == 0
            assert dispatcher.metrics.reconciled_without_resend == 1
            assert rig.starts()[stopped.operation_id] == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C6")
def test_no_free_slot_is_refused_requeued_and_retried(tmp_path: Path) -> None:
    """C6: NO_FREE_SLOT: attempt REFUSED, back to QUEUED with backoff, later runs once.
    (GetRunnerInfo is lost, so the coordinator cannot know the runner is full.)"""

    async def scenario() -> None:
        faults = FaultInterceptor()
        faults.block("GetRunnerInfo")
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            await rig.start_runner(slots=1)
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            first = await rig.submit({"sleep_ms": "2000"})
            await rig.wait_for(first, lambda r: r.state is OpState.RUNNING)
            # A full runner's refusals do not count toward max_attempts (issue 9).
            second = await rig.submit(max_attempts=1)
            done = await rig.terminal(second)
            assert done.state is OpState.SUCCEEDED
            outcomes = [a.outcome for a in await rig.journal.attempts(second)]
            assert AttemptOutcome.REFUSED in outcomes
            assert outcomes[-1] is AttemptOutcome.ACCEPTED
            assert all(o is AttemptOutcome.REFUSED for o in outcomes[:-1])
            assert (await rig.terminal(first)).state is OpState.SUCCEEDED
            assert rig.starts()[first] == 1 and rig.starts()[second] == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


def test_safe_policy_runs_again_on_the_new_incarnation(tmp_path: Path) -> None:
    """§3 SAFE: after an incarnation change it is dispatched again there (counted replay)."""

    async def scenario() -> None:
        faults = FaultInterceptor()
        blocked = (
            "GetOperationStatus",
            "BatchGetOperationStatus",
            "GetRunnerInfo",
            "WatchOperations",
        )
        faults.faults.append(
            Fault("Dispatch", DROP_RESPONSE, on_fire=lambda: faults.block(*blocked))
        )
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            old = await rig.start_runner("r1")
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            op_id = await rig.submit(policy=ReplayPolicy.SAFE)
            await rig.wait_for(op_id, lambda r: r.state is OpState.DISPATCH_UNKNOWN)
            for _ in range(200):
                if rig.starts()[op_id]:
                    break
                await asyncio.sleep(0.02)
            await old.stop(drain=True)
            new = await rig.start_runner("r1", store="r1-replacement", listen=old.address)
            faults.unblock()
            record = await rig.terminal(op_id)
            assert record.state is OpState.SUCCEEDED
            assert record.attempt_count == 2 and record.incarnation_id == new.incarnation_id
            assert record.execution is Execution.STARTED
            assert dispatcher.metrics.replays == 1
            assert rig.starts_on(old.incarnation_id) == 1
            assert rig.starts_on(new.incarnation_id) == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


def test_a_runner_with_no_free_slot_never_fails_the_turn(tmp_path: Path) -> None:
    """Issue 9: refusals by a full runner do not count toward max_attempts: the turn
    waits QUEUED, NOT_STARTED, its events saying what for (it used to end TIMED_OUT
    MAX_ATTEMPTS_EXCEEDED after max_attempts refusals). GetRunnerInfo is lost, so the
    coordinator cannot know the runner has no slot and keeps being refused."""

    async def scenario() -> None:
        faults = FaultInterceptor()
        faults.block("GetRunnerInfo")
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            await rig.start_runner(slots=0)
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            op_id = await rig.submit(max_attempts=2)
            record = await rig.wait_for(
                op_id, lambda r: r.attempt_count >= 4 and r.state is OpState.QUEUED
            )
            assert not record.state.terminal
            assert record.execution is Execution.NOT_STARTED
            outcomes = {a.outcome for a in await rig.journal.attempts(op_id)}
            assert outcomes <= {AttemptOutcome.REFUSED, AttemptOutcome.PENDING}
            events = await rig.journal.events(op_id, 0, 100)
            waits = [e for e in events if e.to_state is OpState.QUEUED and e.from_state]
            assert waits and "waiting for a free WRITABLE slot in pool default" in waits[-1].detail
            assert rig.starts()[op_id] == 0
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C10")
def test_lost_release_is_healed_by_the_next_dispatcher(tmp_path: Path) -> None:
    """C10: Releases lost before a restart are re-sent when the watch shows the row unreleased."""

    async def scenario() -> None:
        db = tmp_path / "journal.db"
        faults = FaultInterceptor(*(Fault("Release", DROP_REQUEST, nth=n) for n in range(1, 9)))
        rig = Rig(tmp_path, sqlite_journal(db), interceptors=faults.all())
        try:
            await rig.start_runner()
            first = rig.make_dispatcher()
            await first.start()
            op_id = await rig.submit()
            assert (await rig.terminal(op_id)).state is OpState.SUCCEEDED
            for _ in range(100):  # until the first dispatcher gave up on its Release
                if first.metrics.rpc_calls["Release"] >= 4:
                    break
                await asyncio.sleep(0.02)
            await first.stop()
            assert not (await rig.runner_row("r1", op_id)).operation.released
            rig.interceptors = ()
            second = rig.make_dispatcher()
            await second.start()
            for _ in range(250):
                if (await rig.runner_row("r1", op_id)).operation.released:
                    break
                await asyncio.sleep(0.02)
            assert (await rig.runner_row("r1", op_id)).operation.released
            assert second.metrics.rpc_calls["Dispatch"] == 0
            assert rig.starts()[op_id] == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C4")
def test_journal_outage_fails_closed_then_resumes(tmp_path: Path) -> None:
    """C4/fail closed: no journal, no attempt row, no Dispatch; afterwards it runs once."""

    async def scenario() -> None:
        journal = FakeJournal()
        rig = Rig(tmp_path, journal)
        try:
            await rig.start_runner()
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            record, event = new_operation()
            await journal.submit(record, event)
            journal.set_available(False)  # no await since the submit: no scan ran yet
            await asyncio.sleep(0.3)  # several due scans fail
            assert dispatcher.metrics.rpc_calls["Dispatch"] == 0
            journal.set_available(True)
            done = await rig.terminal(record.operation_id)
            assert done.state is OpState.SUCCEEDED
            assert rig.starts()[record.operation_id] == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C12")
def test_start_refuses_when_the_journal_is_unavailable(tmp_path: Path) -> None:
    """C12/fail closed: recovery cannot read the journal: start() raises, nothing is sent."""

    async def scenario() -> None:
        journal = FakeJournal()
        rig = Rig(tmp_path, journal)
        try:
            await rig.start_runner()
            record, event = new_operation()
            await journal.submit(record, event)
            dispatcher = rig.make_dispatcher()
            journal.set_available(False)
            with pytest.raises(JournalUnavailable):
                await dispatcher.start()
            assert dispatcher.metrics.total_rpcs == 0
            journal.set_available(True)
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C6")
def test_unparseable_envelope_is_rejected_not_started(tmp_path: Path) -> None:
    """C6: ENVELOPE_INVALID is a final refusal: REJECTED (DISPATCH_REJECTED), NOT_STARTED."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.start_runner()
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            record, event = new_operation()
            garbage = b"\xff\xfe not a TurnEnvelope"
            record = dataclasses.replace(
                record, envelope=garbage, envelope_digest=sha256_hex(garbage)
            )
            await rig.journal.submit(record, event)
            dispatcher.wake(record.operation_id)
            done = await rig.terminal(record.operation_id)
            assert done.state is OpState.REJECTED
            assert done.error_reason == "DISPATCH_REJECTED"
            assert done.execution is Execution.NOT_STARTED
            assert rig.starts()[record.operation_id] == 0
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C14")
def test_executor_that_cannot_start_fails_not_started(tmp_path: Path) -> None:
    """C14: an executor that could not start: FAILED, execution as the settled row proves."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.start_runner()
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            op_id = await rig.submit({"sleep_ms": "not a number"})
            done = await rig.terminal(op_id)
            assert done.state is OpState.FAILED
            assert done.error_reason
            row = await rig.runner_row("r1", op_id)
            assert done.execution.value == turn_pb2.Execution.Name(
                row.operation.execution
            ).removeprefix("EXECUTION_")
            assert rig.starts()[op_id] == 0
        finally:
            await rig.close()

    asyncio.run(scenario())
