"""Issue 8 item 5 against real runners: message limits (a Dispatch a runner can never
receive is refused for good, NOT_STARTED), the confirmed start recorded on a RUNNING
operation (R3), and giving up with a tombstone's proof (C14, R5)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from coordinator_svc.core.model import AttemptOutcome, Execution, OpState
from coordinator_svc.storage import FakeJournal
from tests.support.fault_interceptor import DROP_REQUEST, Fault, FaultInterceptor
from turnwire.common.v1 import turn_pb2
from turnwire.ids import sha256_hex
from turnwire.limits import DEFAULT_RUNNER_MAX_RECEIVE_BYTES, MessageLimits
from turnwire.runner.v1 import runner_pb2
from turnwire.testing.dispatcher_rig import TIMINGS, Rig, new_operation, sqlite_journal

STATUS_AND_WATCH = (
    "GetOperationStatus",
    "BatchGetOperationStatus",
    "GetRunnerInfo",
    "WatchOperations",
)


def sized_envelope(operation_id: str, size: int) -> bytes:
    """A metered turn's envelope of exactly ``size`` bytes (one padded input item)."""
    for pad in range(size, size - 64, -1):  # the length prefix grows with the pad: bounded
        envelope = runner_pb2.TurnEnvelope(
            operation_id=operation_id,
            routing=runner_pb2.Routing(pool="default"),
            model=turn_pb2.ModelRef(provider="test", name="metered", parameters={"output": "ok"}),
            input_items=[turn_pb2.InputItem(item_id="big", content=b"")],
            kind=turn_pb2.TURN_KIND_WRITABLE,
            replay_policy=turn_pb2.REPLAY_POLICY_PROBE_FIRST,
            principal="alice",
        )
        base = envelope.ByteSize()
        envelope.input_items[0].content = b"x" * max(0, pad - base)
        body = envelope.SerializeToString(deterministic=True)
        if len(body) == size:
            return body
    raise AssertionError(f"no envelope of exactly {size} bytes")


async def submit_sized(rig: Rig, size: int) -> str:
    """An operation as the API accepted it before the limits were checked."""
    record, event = new_operation({"output": "ok"})
    body = sized_envelope(record.operation_id, size)
    record = dataclasses.replace(record, envelope=body, envelope_digest=sha256_hex(body))
    await rig.journal.submit(record, event)
    if rig.dispatcher is not None:
        rig.dispatcher.wake(record.operation_id)
    return record.operation_id


# --- a. message limits -----------------------------------------------------------


@pytest.mark.rule("C6", "C14")
def test_dispatch_over_the_runner_receive_limit_is_rejected_not_started_unsent(
    tmp_path: Path,
) -> None:
    """C6/C14: 4 MiB of envelope makes a Dispatch of more than 4 MiB: it is never sent,
    the operation is REJECTED (DISPATCH_REJECTED) NOT_STARTED, not UNKNOWN after replays."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.start_runner()
            dispatcher = rig.make_dispatcher(status_poll=60.0)
            await dispatcher.start()
            op_id = await submit_sized(rig, DEFAULT_RUNNER_MAX_RECEIVE_BYTES - 100)
            record = await rig.terminal(op_id)
            assert record.state is OpState.REJECTED, record
            assert record.error_reason == "DISPATCH_REJECTED"
            assert record.execution is Execution.NOT_STARTED
            attempts = await rig.journal.attempts(op_id)
            assert [a.outcome for a in attempts] == [AttemptOutcome.REFUSED]
            assert not (await rig.runner_row("r1", op_id)).present
            assert rig.starts()[op_id] == 0
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C6")
def test_runner_receive_limit_below_the_coordinator_assumption_is_a_definite_refusal(
    tmp_path: Path,
) -> None:
    """C6: gRPC refuses an oversized message on the runner before its handler runs, so
    RESOURCE_EXHAUSTED "received message larger than max" for our very Dispatch is
    definite: REJECTED NOT_STARTED after one send, no replay."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.start_runner("r1", max_receive_bytes=64 * 1024)
            dispatcher = rig.make_dispatcher(status_poll=60.0)
            await dispatcher.start()
            op_id = await submit_sized(rig, 100 * 1024)
            record = await rig.terminal(op_id)
            assert record.state is OpState.REJECTED, record
            assert record.execution is Execution.NOT_STARTED
            assert dispatcher.metrics.rpc_calls["Dispatch"] == 1
            assert rig.starts()[op_id] == 0
        finally:
            await rig.close()

    asyncio.run(scenario())


def test_largest_envelope_the_coordinator_accepts_reaches_the_runner(tmp_path: Path) -> None:
    """The chain holds: an envelope of exactly max_envelope_bytes, with its Dispatch
    framing, fits the runner's default receive limit and runs once."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.start_runner()
            dispatcher = rig.make_dispatcher(status_poll=60.0)
            await dispatcher.start()
            op_id = await submit_sized(rig, MessageLimits().max_envelope_bytes)
            record = await rig.terminal(op_id)
            assert record.state is OpState.SUCCEEDED, record
            assert rig.starts()[op_id] == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


# --- b. the confirmed start of a RUNNING operation ---------------------------------


@pytest.mark.rule("R3", "C9")
def test_running_commit_carries_the_confirmed_start_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    """R3/C9: the held Dispatch reply takes the watch's STARTED row: RUNNING is committed
    with execution STARTED and no extra commit; the later incarnation change ends
    TIMED_OUT with STARTED, not UNKNOWN."""

    async def scenario() -> None:
        faults = FaultInterceptor()
        rig = Rig(tmp_path, sqlite_journal(tmp_path / "journal.db"), interceptors=faults.all())
        try:
            old = await rig.start_runner("r1")
            dispatcher = rig.make_dispatcher(status_poll=60.0)
            await dispatcher.start()
            op_id = await rig.submit({"sleep_ms": "30000"})
            record = await rig.wait_for(op_id, lambda r: r.state is OpState.RUNNING)
            assert record.execution is Execution.STARTED
            # The row is visible as soon as SQLite commits it; the journal counts
            # the commit when its caller resumes, a moment later (bounded wait).
            for _ in range(100):
                if rig.journal.commits >= 3:
                    break
                await asyncio.sleep(0.01)
            assert rig.journal.commits == 3  # submit, DISPATCHING, RUNNING
            faults.block(*STATUS_AND_WATCH)
            await old.stop(drain=False)
            await rig.start_runner("r1", store="r1-replacement", listen=old.address)
            faults.unblock()
            record = await rig.terminal(op_id)
            assert record.state is OpState.TIMED_OUT
            assert record.error_reason == "INCARNATION_CHANGED"
            assert record.execution is Execution.STARTED
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("R3")
def test_start_confirmed_after_the_running_commit_is_still_recorded(tmp_path: Path) -> None:
    """R3: with no hold for the start, the STARTED report (watch or fallback poll) is
    written on its own; the incarnation change then ends STARTED."""

    async def scenario() -> None:
        faults = FaultInterceptor()
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            old = await rig.start_runner("r1")
            timings = dataclasses.replace(TIMINGS, start_grace=0.0, settle_grace=0.0)
            dispatcher = rig.make_dispatcher(timings=timings, status_poll=0.3)
            await dispatcher.start()
            op_id = await rig.submit({"sleep_ms": "30000"})
            await rig.wait_for(
                op_id,
                lambda r: r.state is OpState.RUNNING and r.execution is Execution.STARTED,
            )
            faults.block(*STATUS_AND_WATCH)
            await old.stop(drain=False)
            await rig.start_runner("r1", store="r1-replacement", listen=old.address)
            faults.unblock()
            record = await rig.terminal(op_id)
            assert record.error_reason == "INCARNATION_CHANGED"
            assert record.execution is Execution.STARTED
        finally:
            await rig.close()

    asyncio.run(scenario())


# --- c. giving up with a tombstone's proof ---------------------------------------------


@pytest.mark.rule("C14", "R5")
def test_every_dispatch_lost_ends_max_attempts_not_started_by_tombstone(tmp_path: Path) -> None:
    """C14/R5: every Dispatch request lost, max_attempts reached on a runner that still
    answers on the same incarnation: a Cancel tombstones it, NOT_STARTED, not UNKNOWN."""

    async def scenario() -> None:
        faults = FaultInterceptor()
        faults.block("Dispatch")
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            await rig.start_runner()
            dispatcher = rig.make_dispatcher(status_poll=60.0)
            await dispatcher.start()
            op_id = await rig.submit(max_attempts=2)
            record = await rig.terminal(op_id)
            assert record.state is OpState.TIMED_OUT
            assert record.error_reason == "MAX_ATTEMPTS_EXCEEDED"
            assert record.execution is Execution.NOT_STARTED
            assert record.attempt_count == 2
            row = await rig.runner_row("r1", op_id)
            assert (
                row.present and row.operation.state == runner_pb2.RUNNER_OPERATION_STATE_TOMBSTONED
            )
            assert dispatcher.metrics.rpc_calls["Cancel"] == 1
            assert rig.starts()[op_id] == 0
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C8", "C14")
def test_reconcile_deadline_with_a_reachable_runner_ends_not_started(tmp_path: Path) -> None:
    """C8/C14: status unanswered until the reconcile deadline, Dispatch lost: the give-up
    Cancel still reaches the bound incarnation and its tombstone proves NOT_STARTED."""

    async def scenario() -> None:
        faults = FaultInterceptor()
        faults.faults.append(
            Fault("Dispatch", DROP_REQUEST, on_fire=lambda: faults.block(*STATUS_AND_WATCH))
        )
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            runner = await rig.start_runner()
            short = dataclasses.replace(TIMINGS, reconcile_deadline=0.5)
            dispatcher = rig.make_dispatcher(timings=short, status_poll=60.0)
            await dispatcher.start()
            op_id = await rig.submit()
            record = await rig.terminal(op_id)
            assert record.state is OpState.TIMED_OUT
            assert record.error_reason == "RECONCILE_DEADLINE"
            assert record.execution is Execution.NOT_STARTED
            assert record.incarnation_id == runner.incarnation_id
            assert dispatcher.metrics.rpc_calls["Dispatch"] == 1
            assert rig.starts()[op_id] == 0
        finally:
            await rig.close()

    asyncio.run(scenario())
