"""Race regressions on a live runner (R2-R8, §6): each test is named for the race it pins."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from runner_svc.core.model import SlotKind, StopReason
from runner_svc.core.transitions import Admit, RecordStopReason, RowEvent
from runner_svc.executors import ExecutionOutcome, ExecutionRequest
from runner_svc.storage.sqlite_store import SqliteRunnerStore
from tests.runner.gated_executor import GatedExecutor, row_state_on_disk
from tests.runner.live import READ_ONLY, dispatch_request, envelope, live_runner
from turnwire.common.v1 import turn_pb2
from turnwire.errors import error_info
from turnwire.ids import sha256_hex, stamp_now
from turnwire.ledger import count_starts
from turnwire.runner.v1 import runner_pb2

R = runner_pb2
SETTLED_STATES = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT")


async def reason_of(call: object) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    typed = error_info(caught.value)
    assert typed is not None, caught.value
    return typed.reason


@pytest.mark.rule("R2")
def test_concurrent_duplicate_dispatches_start_the_executor_once(tmp_path: Path) -> None:
    """R2: many concurrent Dispatches of one id start one execution (metered ledger)."""
    ledger = tmp_path / "ledger.jsonl"

    async def main() -> None:
        async with live_runner(tmp_path / "r.db", executor="metered", ledger_path=ledger) as live:
            body = envelope("op_dup", sleep_ms=200)
            request = dispatch_request("op_dup", body, live.incarnation)
            replies = await asyncio.gather(*(live.stub.Dispatch(request) for _ in range(20)))
            assert sum(not reply.duplicate for reply in replies) == 1
            done = await live.wait_settled("op_dup")
            assert done.state == R.RUNNER_OPERATION_STATE_SUCCEEDED

    asyncio.run(main())
    assert count_starts(ledger)["op_dup"] == 1


@pytest.mark.rule("R2")
def test_sequential_duplicate_while_first_still_runs_starts_nothing(tmp_path: Path) -> None:
    """R2: a Dispatch repeated while the first runs replies duplicate with the live status."""
    ledger = tmp_path / "ledger.jsonl"

    async def main() -> None:
        async with live_runner(tmp_path / "r.db", executor="metered", ledger_path=ledger) as live:
            await live.dispatch("op_seq", sleep_ms=400)
            await live.wait_state("op_seq", lambda op: op.state == R.RUNNER_OPERATION_STATE_RUNNING)
            for _ in range(3):
                again = await live.dispatch("op_seq", sleep_ms=400)
                assert again.duplicate
                assert again.operation.state == R.RUNNER_OPERATION_STATE_RUNNING
            await live.wait_settled("op_seq")
            assert (await live.dispatch("op_seq", sleep_ms=400)).duplicate

    asyncio.run(main())
    assert count_starts(ledger)["op_seq"] == 1


@pytest.mark.rule("R5")
def test_cancel_before_dispatch_arrives_means_it_never_runs(tmp_path: Path) -> None:
    """R5: a Cancel that overtakes its Dispatch leaves a tombstone; the Dispatch never runs."""
    ledger = tmp_path / "ledger.jsonl"

    async def main() -> None:
        async with live_runner(tmp_path / "r.db", executor="metered", ledger_path=ledger) as live:
            assert (await live.cancel("op_early")).tombstoned
            assert await reason_of(live.dispatch("op_early")) == "CANCELLED_BEFORE_DISPATCH"
            again = await live.cancel("op_early")
            assert again.tombstoned and again.operation.state == R.RUNNER_OPERATION_STATE_TOMBSTONED

    asyncio.run(main())
    assert count_starts(ledger)["op_early"] == 0


@pytest.mark.rule("R3", "R6")
def test_cancel_during_launch_stops_the_started_executor(tmp_path: Path) -> None:
    """R3/R6: a Cancel arriving while the executor starts waits for the start, then stops it."""
    gate = asyncio.Event()
    gated = GatedExecutor(start_gate=gate, finish_at_once=False)

    async def main() -> None:
        async with live_runner(
            tmp_path / "r.db", executor_override=gated, writable_slots=1
        ) as live:
            await live.dispatch("op_launch")
            await asyncio.wait_for(gated.start_entered.wait(), 5)
            cancel = asyncio.ensure_future(live.cancel("op_launch"))
            await asyncio.sleep(0.05)
            assert not cancel.done()  # the launch holds the operation's lock
            assert row_state_on_disk(live.store_path, "op_launch") == "LAUNCHING"
            gate.set()
            reply = await asyncio.wait_for(cancel, 5)
            assert reply.operation.stop_reason == turn_pb2.STOP_REASON_CANCEL
            done = await live.wait_settled("op_launch")
            assert done.state == R.RUNNER_OPERATION_STATE_CANCELLED
            assert done.execution == turn_pb2.EXECUTION_STARTED
            assert gated.handles["op_launch"].cancel_requests >= 1

    asyncio.run(main())
    assert gated.starts == ["op_launch"]


@pytest.mark.rule("R6")
def test_abort_then_late_settlement_frees_the_slot_only_when_settled(tmp_path: Path) -> None:
    """R6: cancel never frees the slot; a turn that finishes after the cancel stays SUCCEEDED."""
    gated = GatedExecutor(finish_at_once=False, finish_on_cancel=False)

    async def main() -> None:
        async with live_runner(
            tmp_path / "r.db", executor_override=gated, writable_slots=1
        ) as live:
            await live.dispatch("op_late")
            await live.wait_state(
                "op_late", lambda op: op.state == R.RUNNER_OPERATION_STATE_RUNNING
            )
            reply = await live.cancel("op_late")
            assert reply.operation.state == R.RUNNER_OPERATION_STATE_RUNNING
            assert reply.operation.stop_reason == turn_pb2.STOP_REASON_CANCEL
            info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
            writable = {p.kind: p.in_use for p in info.pools}[turn_pb2.TURN_KIND_WRITABLE]
            assert writable == 1
            assert await reason_of(live.dispatch("op_next")) == "NO_FREE_SLOT"
            gated.handles["op_late"].finish.set()  # the executor settles late, successfully
            done = await live.wait_settled("op_late")
            assert done.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            # The cancel stopped nothing: the settled row reports no stop reason (R6).
            assert done.stop_reason == turn_pb2.STOP_REASON_UNSPECIFIED
            assert not (await live.dispatch("op_next")).duplicate
            await live.wait_state(
                "op_next", lambda op: op.state == R.RUNNER_OPERATION_STATE_RUNNING
            )
            gated.handles["op_next"].finish.set()
            await live.wait_settled("op_next")

    asyncio.run(main())


@pytest.mark.rule("R8")
def test_shutdown_refuses_new_dispatch_and_drains_running_turns(tmp_path: Path) -> None:
    """R8: draining refuses admission (SHUTTING_DOWN), says NOT_SERVING, lets jobs finish."""
    store_path = tmp_path / "r.db"

    async def main() -> None:
        async with live_runner(store_path, executor="sleep", drain_seconds=5.0) as live:
            await live.dispatch("op_drain", sleep_ms=500)
            await live.wait_state(
                "op_drain", lambda op: op.state == R.RUNNER_OPERATION_STATE_RUNNING
            )
            stopping = asyncio.ensure_future(live.runner.stop())
            await asyncio.sleep(0.1)
            assert await reason_of(live.dispatch("op_new")) == "SHUTTING_DOWN"
            health = health_pb2_grpc.HealthStub(live.channel)
            reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
            info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
            assert not info.accepting
            await asyncio.wait_for(stopping, 10)

    asyncio.run(main())
    store = SqliteRunnerStore.open(store_path, "c" * 32)
    try:
        row = store.get("op_drain")
        assert row is not None and row.state.value == "SUCCEEDED"
        assert row.stop_reason is None  # the drain stopped nothing: it finished (R6, R8)
        assert store.get("op_new") is None
    finally:
        store.close()


@pytest.mark.rule("R8")
def test_drain_deadline_cancels_what_is_still_running(tmp_path: Path) -> None:
    """R8: past the drain deadline, running turns are cancelled and settle CANCELLED (SHUTDOWN)."""
    store_path = tmp_path / "r.db"

    async def main() -> None:
        async with live_runner(store_path, executor="sleep", drain_seconds=0.2) as live:
            await live.dispatch("op_long", sleep_ms=30_000)
            await live.wait_state(
                "op_long", lambda op: op.state == R.RUNNER_OPERATION_STATE_RUNNING
            )

    asyncio.run(main())
    store = SqliteRunnerStore.open(store_path, "c" * 32)
    try:
        row = store.get("op_long")
        assert row is not None and row.state.value == "CANCELLED"
        assert row.error is not None and row.error.reason == "SHUTDOWN"
        assert row.execution.value == "STARTED"
    finally:
        store.close()


def install_failing_trigger(store_path: Path, event: str, condition: str = "") -> None:
    """Make the real SQLite file refuse some writes (a real write failure, not a mock)."""
    connection = sqlite3.connect(store_path, timeout=5)
    when = f"WHEN {condition} " if condition else ""
    connection.execute(
        f"CREATE TRIGGER refuse_write {event} ON runner_operations {when}"
        "BEGIN SELECT RAISE(ABORT, 'injected: the disk refuses this write'); END"
    )
    connection.commit()
    connection.close()


def drop_failing_trigger(store_path: Path) -> None:
    connection = sqlite3.connect(store_path, timeout=5)
    connection.execute("DROP TRIGGER refuse_write")
    connection.commit()
    connection.close()


@pytest.mark.rule("R7")
@pytest.mark.parametrize(
    ("sleep_ms", "left"),
    [
        # Confirmed while it ran: the row stays RUNNING (STARTED).
        pytest.param(300, "RUNNING", id="confirmed"),
        # Finished as it started: only the settlement would have recorded the
        # start, so the row keeps its launch intent (UNKNOWN: still true, R3).
        pytest.param(None, "LAUNCHING", id="finished-before-confirmation"),
    ],
)
def test_failed_terminal_write_holds_the_slot_and_reports_result_not_saved(
    tmp_path: Path, sleep_ms: int | None, left: str
) -> None:
    """R7: a settlement that cannot be saved holds the slot and is never reported as a result."""
    store_path = tmp_path / "r.db"

    async def main() -> None:
        async with live_runner(store_path, writable_slots=1) as live:
            install_failing_trigger(
                store_path,
                "BEFORE UPDATE OF state",
                "NEW.state IN ('SUCCEEDED','FAILED','CANCELLED','TIMED_OUT')",
            )
            await live.dispatch("op_unsaved", output="lost", sleep_ms=sleep_ms)
            shown = await live.wait_state("op_unsaved", lambda op: op.result_not_saved)
            assert R.RunnerOperationState.Name(shown.state) == f"RUNNER_OPERATION_STATE_{left}"
            assert not shown.HasField("result")
            info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
            assert info.held_result_not_saved == 1
            assert {p.kind: p.in_use for p in info.pools}[turn_pb2.TURN_KIND_WRITABLE] == 1
            assert await reason_of(live.dispatch("op_after")) == "NO_FREE_SLOT"

    asyncio.run(main())
    assert row_state_on_disk(store_path, "op_unsaved") == left


@pytest.mark.rule("R4")
def test_failed_admission_write_releases_the_reservation(tmp_path: Path) -> None:
    """R4: a dedupe row that cannot be written is STORE_WRITE_FAILED and gives the slot back."""
    store_path = tmp_path / "r.db"

    async def main() -> None:
        async with live_runner(store_path, writable_slots=1) as live:
            install_failing_trigger(store_path, "BEFORE INSERT")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await live.dispatch("op_nowrite")
            typed = error_info(caught.value)
            assert typed is not None and typed.reason == "STORE_WRITE_FAILED"
            assert typed.code == grpc.StatusCode.UNAVAILABLE
            assert typed.metadata["incarnation_id"] == live.incarnation
            drop_failing_trigger(store_path)
            assert not (await live.dispatch("op_nowrite")).duplicate
            await live.wait_settled("op_nowrite")

    asyncio.run(main())


@pytest.mark.rule("R4")
def test_full_writable_pool_does_not_block_read_only_turns(tmp_path: Path) -> None:
    """R4: slot exhaustion of one kind leaves the other pool admitting."""

    async def main() -> None:
        async with live_runner(
            tmp_path / "r.db", executor="sleep", writable_slots=1, read_only_slots=1
        ) as live:
            await live.dispatch("op_w", sleep_ms=30_000)
            assert await reason_of(live.dispatch("op_w2", sleep_ms=10)) == "NO_FREE_SLOT"
            await live.dispatch("op_r", sleep_ms=10, kind=READ_ONLY)
            done = await live.wait_settled("op_r")
            assert done.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            await live.cancel("op_w")
            await live.wait_settled("op_w")

    asyncio.run(main())


@pytest.mark.rule("R3", "R4")
def test_launch_intent_is_durable_before_the_executor_starts(tmp_path: Path) -> None:
    """R3: the intent is on disk when the executor is started. A turn that launches at
    once has it in its admission's own write (R4, issue 27): the Dispatch reply shows
    it, and nothing more is written to the row before the start (its sequence is the
    reply's)."""
    store_path = tmp_path / "r.db"
    seen: list[tuple[str, int] | None] = []
    gate = asyncio.Event()

    def observe(request: ExecutionRequest) -> None:
        seen.append(row_on_disk(store_path, request.operation_id))

    gated = GatedExecutor(on_start=observe, start_gate=gate)
    replied: list[runner_pb2.RunnerOperation] = []

    async def main() -> None:
        async with live_runner(store_path, executor_override=gated) as live:
            reply = await live.dispatch("op_wal")
            replied.append(reply.operation)
            assert reply.operation.state == R.RUNNER_OPERATION_STATE_LAUNCHING
            assert row_state_on_disk(store_path, "op_wal") == "LAUNCHING"
            await asyncio.wait_for(gated.start_entered.wait(), 5)
            gate.set()
            done = await live.wait_settled("op_wal")
            assert done.state == R.RUNNER_OPERATION_STATE_SUCCEEDED

    asyncio.run(main())
    assert seen == [("LAUNCHING", replied[0].sequence)]


@pytest.mark.rule("R3", "R6", "C14")
def test_a_turn_past_its_deadline_is_admitted_alone_and_never_launched(tmp_path: Path) -> None:
    """R3/R6/C14: a Dispatch that arrives after its turn's deadline is admitted without
    a launch intent (its launch check would fail): the reply shows it ACCEPTED, and it
    settles TIMED_OUT, DEADLINE_EXCEEDED, NOT_STARTED, with no executor started."""
    gated = GatedExecutor()

    async def main() -> None:
        async with live_runner(tmp_path / "r.db", executor_override=gated) as live:
            reply = await live.dispatch("op_late", deadline=time.time() - 60.0)
            assert reply.operation.state == R.RUNNER_OPERATION_STATE_ACCEPTED
            done = await live.wait_settled("op_late")
            assert (done.state, done.execution) == (
                R.RUNNER_OPERATION_STATE_TIMED_OUT,
                turn_pb2.EXECUTION_NOT_STARTED,
            )
            assert done.error.reason == "DEADLINE_EXCEEDED"

    asyncio.run(main())
    assert gated.starts == []


def row_on_disk(store_path: Path, operation_id: str) -> tuple[str, int] | None:
    """The row's state and change sequence as a fresh connection sees them."""
    connection = sqlite3.connect(store_path, timeout=5)
    try:
        found = connection.execute(
            "SELECT state, sequence FROM runner_operations WHERE operation_id = ?",
            (operation_id,),
        ).fetchone()
    finally:
        connection.close()
    return (str(found[0]), int(found[1])) if found else None


@pytest.mark.rule("R3", "C14")
def test_executor_refusing_to_start_settles_failed_not_started(tmp_path: Path) -> None:
    """R3/C14: an executor that could not start leaves FAILED, execution NOT_STARTED."""
    gated = GatedExecutor(refuse_start=True)

    async def main() -> None:
        async with live_runner(
            tmp_path / "r.db", executor_override=gated, writable_slots=1
        ) as live:
            await live.dispatch("op_nostart")
            done = await live.wait_settled("op_nostart")
            assert done.state == R.RUNNER_OPERATION_STATE_FAILED
            assert done.error.reason == "EXECUTOR_UNAVAILABLE"
            assert done.execution == turn_pb2.EXECUTION_NOT_STARTED
            assert not (await live.dispatch("op_second")).duplicate  # slot was freed

    asyncio.run(main())


OLD = "0" * 32


def seed_old_rows(
    store_path: Path,
    rows: dict[str, bytes],
    *,
    then: tuple[tuple[str, RowEvent], ...] = (),
    seal: bool = True,
) -> None:
    """Rows an earlier incarnation (OLD) accepted and never launched (then
    ``then``); a clean stop seals the store (§6 witness) unless ``seal`` is False."""
    store = SqliteRunnerStore.open(store_path, OLD)
    # Written a moment ago, as an earlier incarnation that just stopped wrote
    # them: rows unchanged for --retain-unreleased (30 d) would be pruned by the
    # next runner's first retention pass (§9 K6), which is another test's case.
    now = time.time()
    try:
        for op, body in rows.items():
            store.write(op, Admit(op, OLD, SlotKind.WRITABLE, sha256_hex(body), 1, 1, now, 5))
        for op, event in then:
            store.write(op, event)
        if seal:
            store.seal()
    finally:
        store.close()


def test_old_accepted_row_is_taken_over_before_it_runs(tmp_path: Path) -> None:
    """§6: an earlier incarnation's accepted row that its shutdown stopped before
    launch, in a store it sealed, is reported as such, then taken over by a write."""
    store_path, ledger = tmp_path / "r.db", tmp_path / "ledger.jsonl"
    body = envelope("op_old")
    seed_old_rows(
        store_path, {"op_old": body}, then=(("op_old", RecordStopReason(StopReason.SHUTDOWN)),)
    )

    async def main() -> None:
        async with live_runner(store_path, executor="metered", ledger_path=ledger) as live:
            before = (await live.status("op_old")).operation
            assert before.state == R.RUNNER_OPERATION_STATE_ACCEPTED
            assert before.incarnation_id == OLD
            reply = await live.stub.Dispatch(
                dispatch_request("op_old", body, live.incarnation, attempt=2)
            )
            assert not reply.duplicate
            assert reply.operation.incarnation_id == live.incarnation
            assert reply.operation.attempt == 2
            done = await live.wait_settled("op_old")
            assert done.state == R.RUNNER_OPERATION_STATE_SUCCEEDED
            again = await live.stub.Dispatch(dispatch_request("op_old", body, live.incarnation))
            assert again.duplicate

    asyncio.run(main())
    assert count_starts(ledger)["op_old"] == 1


@pytest.mark.rule("C11", "C14")
def test_cancel_of_old_accepted_row_settles_it_not_started(tmp_path: Path) -> None:
    """C11/C14: a never-launched row is settled CANCELLED NOT_STARTED and then never runs."""
    store_path, ledger = tmp_path / "r.db", tmp_path / "ledger.jsonl"
    body = envelope("op_stop")
    seed_old_rows(store_path, {"op_stop": body})

    async def main() -> None:
        async with live_runner(store_path, executor="metered", ledger_path=ledger) as live:
            reply = await live.cancel("op_stop")
            assert not reply.tombstoned
            assert reply.operation.state == R.RUNNER_OPERATION_STATE_CANCELLED
            assert reply.operation.execution == turn_pb2.EXECUTION_NOT_STARTED
            again = await live.stub.Dispatch(dispatch_request("op_stop", body, live.incarnation))
            assert again.duplicate
            assert again.operation.state == R.RUNNER_OPERATION_STATE_CANCELLED

    asyncio.run(main())
    assert count_starts(ledger)["op_stop"] == 0


@pytest.mark.rule("R2")
def test_interrupted_rows_are_never_run_again(tmp_path: Path) -> None:
    """R2/§6: a row an earlier incarnation left RUNNING reads INTERRUPTED and a Dispatch dedupes."""
    from runner_svc.core.transitions import ConfirmStart, LaunchIntent

    store_path, ledger = tmp_path / "r.db", tmp_path / "ledger.jsonl"
    body = envelope("op_int")
    seed_old_rows(
        store_path,
        {"op_int": body},
        then=(("op_int", LaunchIntent(OLD)), ("op_int", ConfirmStart(OLD, time.time()))),
    )

    async def main() -> None:
        async with live_runner(store_path, executor="metered", ledger_path=ledger) as live:
            reply = await live.stub.Dispatch(dispatch_request("op_int", body, live.incarnation))
            assert reply.duplicate
            assert reply.operation.state == R.RUNNER_OPERATION_STATE_INTERRUPTED
            assert reply.operation.execution == turn_pb2.EXECUTION_STARTED
            assert reply.operation.incarnation_id == OLD
            cancel = await live.cancel("op_int")
            assert cancel.operation.state == R.RUNNER_OPERATION_STATE_INTERRUPTED

    asyncio.run(main())
    assert count_starts(ledger)["op_int"] == 0


@pytest.mark.rule("R7")
def test_succeeded_outcome_metadata_survives(tmp_path: Path) -> None:
    """R7: a valid outcome's output, content type and metadata are stored and reported."""
    gated = GatedExecutor(
        outcome=ExecutionOutcome(
            succeeded=True, output=b"\x00bin", content_type="x/y", metadata={"tokens": "12"}
        )
    )

    async def main() -> None:
        async with live_runner(tmp_path / "r.db", executor_override=gated) as live:
            await live.dispatch("op_meta")
            done = await live.wait_settled("op_meta")
            assert done.result.output == b"\x00bin" and done.result.content_type == "x/y"
            assert dict(done.result.metadata) == {"tokens": "12"}

    asyncio.run(main())


@pytest.mark.rule("R6")
def test_cancel_then_deadline_keeps_cancel_as_the_stop_reason(tmp_path: Path) -> None:
    """R6: a deadline passing after a Cancel does not replace it; the turn ends CANCELLED."""
    gated = GatedExecutor(finish_at_once=False, finish_on_cancel=False)

    async def main() -> None:
        async with live_runner(tmp_path / "r.db", executor_override=gated) as live:
            await live.dispatch("op_two", deadline=time.time() + 0.3)
            await live.wait_state("op_two", lambda op: op.state == R.RUNNER_OPERATION_STATE_RUNNING)
            await live.cancel("op_two")
            await asyncio.sleep(0.6)  # the deadline passes while the executor ignores the cancel
            handle = gated.handles["op_two"]
            assert handle.cancel_requests >= 2  # asked by the cancel, again by the deadline
            handle.outcome = ExecutionOutcome(succeeded=False, error_reason="CANCELLED")
            handle.finish.set()
            done = await live.wait_settled("op_two")
            assert done.stop_reason == turn_pb2.STOP_REASON_CANCEL
            assert (done.state, done.error.reason) == (
                R.RUNNER_OPERATION_STATE_CANCELLED,
                "CANCELLED",
            )

    asyncio.run(main())


@pytest.mark.rule("R3", "C14")
def test_cancel_between_accept_and_launch_settles_not_started(tmp_path: Path) -> None:
    """R3/C14: a Cancel queued behind the admission wins the lock before the launch: never runs."""
    from runner_svc.service import DispatchCall

    gated = GatedExecutor()

    async def main() -> None:
        async with live_runner(tmp_path / "r.db", executor_override=gated) as live:
            service = live.runner.service
            body = envelope("op_gap")
            call = DispatchCall(
                "op_gap", body, sha256_hex(body), live.incarnation, 1, 1, stamp_now()
            )
            # Both enter the same operation lock in order (asyncio.Lock is FIFO): the
            # Cancel is queued before the background launch even asks for the lock.
            accepted, cancelled = await asyncio.gather(
                service.dispatch(call), service.cancel("op_gap", live.incarnation, 1)
            )
            assert not accepted.duplicate and not cancelled.tombstoned
            assert cancelled.view.row.state.value == "CANCELLED"
            assert cancelled.view.row.execution.value == "NOT_STARTED"
            await asyncio.sleep(0.1)  # let the launch task see the settled row
            done = (await live.status("op_gap")).operation
            assert done.state == R.RUNNER_OPERATION_STATE_CANCELLED
            assert done.execution == turn_pb2.EXECUTION_NOT_STARTED
            info = await live.stub.GetRunnerInfo(R.GetRunnerInfoRequest())
            assert all(pool.in_use == 0 for pool in info.pools)

    asyncio.run(main())
    assert gated.starts == []
