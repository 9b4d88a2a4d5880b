"""Issue 9: a busy runner is not a failing runner.

The coordinator learns each runner's slot pools (GetRunnerInfo) and counts what
it has bound there, so it dispatches only where a slot of the turn's kind is
free, and a turn that finds every runner full waits. Where its knowledge falls
short (sizes not known yet), the runner's NO_FREE_SLOT refusal never counts
toward max_attempts and never fails a turn (C6a)."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.model import AttemptOutcome, Execution, OpState, TurnKind
from coordinator_svc.dispatcher import Dispatcher, utc_now
from coordinator_svc.feed import ChangeFeed
from coordinator_svc.storage import FakeJournal
from tests.support.fault_interceptor import FaultInterceptor
from turnwire.ids import sha256_hex
from turnwire.runner.v1 import runner_pb2
from turnwire.testing.dispatcher_rig import TIMINGS, Rig, new_operation

TURNS = 6
SLOTS = 2


async def _run_turns(rig: Rig) -> tuple[list[str], int]:
    """TURNS turns of 400 ms with max_attempts=2; all must succeed, each once."""
    ops = [await rig.submit({"sleep_ms": "400"}, max_attempts=2) for _ in range(TURNS)]
    done = [await rig.terminal(op, within=30.0) for op in ops]
    assert [d.state for d in done] == [OpState.SUCCEEDED] * TURNS, [
        (d.state, d.error_reason) for d in done
    ]
    assert all(rig.starts()[op] == 1 for op in ops)
    refused = 0
    for op in ops:
        attempts = await rig.journal.attempts(op)
        refused += sum(a.outcome is AttemptOutcome.REFUSED for a in attempts)
        assert attempts[-1].outcome is AttemptOutcome.ACCEPTED
    return ops, refused


@pytest.mark.rule("C6a", "R4")
def test_a_runner_is_sent_only_what_it_has_slots_for(tmp_path: Path) -> None:
    """C6a, R4 (regression): turns beyond the runner's slots were Dispatched, refused NO_FREE_SLOT,
    and ended TIMED_OUT MAX_ATTEMPTS_EXCEEDED without ever running. Now they wait for
    a slot: all succeed and no Dispatch is refused."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            await rig.sized_dispatcher(SLOTS)
            _, refused = await _run_turns(rig)
            assert refused == 0
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C6a")
def test_refusals_of_a_runner_whose_size_is_unknown_never_fail_a_turn(tmp_path: Path) -> None:
    """C6a: GetRunnerInfo is lost, so the coordinator cannot know the runner is full;
    its NO_FREE_SLOT refusals do not count, and each waiting turn says what it waits for."""

    async def scenario() -> None:
        faults = FaultInterceptor()
        faults.block("GetRunnerInfo")
        rig = Rig(tmp_path, FakeJournal(), interceptors=faults.all())
        try:
            await rig.start_runner(slots=SLOTS)
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            ops, refused = await _run_turns(rig)
            assert refused > 0, "the runner was never full: the test proves nothing"
            events = [e for op in ops for e in await rig.journal.events(op, 0, 1000)]
            waiting = [e for e in events if e.to_state is OpState.QUEUED and e.from_state]
            assert waiting and all("waiting for a free WRITABLE slot" in e.detail for e in waiting)
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C6a", "R4")
def test_a_turn_that_finds_every_runner_full_waits_without_a_dispatch(tmp_path: Path) -> None:
    """C6a, R4: a runner known to have no free slot is not sent anything: the turn waits
    QUEUED (no attempt, NOT_STARTED) and runs as soon as a slot frees."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            dispatcher = await rig.sized_dispatcher(1)
            first = await rig.submit({"sleep_ms": "1500"})
            await rig.wait_for(first, lambda r: r.state is OpState.RUNNING)
            second = await rig.submit(max_attempts=1)
            for _ in range(100):  # bounded: 5 s, until it is parked waiting for the slot
                if dispatcher.room.scheduler.waiting():
                    break
                await asyncio.sleep(0.05)
            waiting = await rig.journal.get(second)
            assert waiting is not None and waiting.state is OpState.QUEUED
            assert waiting.attempt_count == 0
            done = await rig.terminal(second)
            assert done.state is OpState.SUCCEEDED and done.attempt_count == 1
            assert (await rig.terminal(first)).state is OpState.SUCCEEDED
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C6a", "C14")
def test_a_turn_still_waiting_at_its_deadline_ends_timed_out_not_started(tmp_path: Path) -> None:
    """C6a, C14: the coordinator applies the turn's deadline while it waits for a slot."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        try:
            dispatcher = await rig.sized_dispatcher(1)
            first = await rig.submit({"sleep_ms": "3000"})
            await rig.wait_for(first, lambda r: r.state is OpState.RUNNING)
            record, event = new_operation()
            envelope = runner_pb2.TurnEnvelope()
            envelope.ParseFromString(record.envelope)
            envelope.limits.deadline.FromDatetime(utc_now() + timedelta(milliseconds=800))
            body = envelope.SerializeToString(deterministic=True)
            record = dataclasses.replace(record, envelope=body, envelope_digest=sha256_hex(body))
            await rig.journal.submit(record, event)
            dispatcher.wake(record.operation_id)
            late = await rig.terminal(record.operation_id)
            assert late.state is OpState.TIMED_OUT and late.error_reason == "DEADLINE_EXCEEDED"
            # Ended at its deadline, without a Dispatch, while the slot was still taken:
            # not once it freed (the runner would then have refused to start it, one
            # Dispatch too many).
            assert late.execution is Execution.NOT_STARTED and late.attempt_count == 0
            holder = await rig.terminal(first)
            assert late.finished_at is not None and holder.finished_at is not None
            assert late.finished_at < holder.finished_at
            assert rig.starts()[record.operation_id] == 0
            assert holder.state is OpState.SUCCEEDED
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C6a", "R4")
def test_a_slot_another_coordinator_holds_is_waited_for_not_dispatched_to(
    tmp_path: Path,
) -> None:
    """C6a, R4 (issue 9): a turn another coordinator replica started holds the runner's
    only slot. This coordinator's journal does not know it, but the runner's watch
    stream reports the slot in use: this coordinator's turn waits QUEUED with no
    attempt (no NO_FREE_SLOT refusal) until the slot frees, then runs once."""

    async def scenario() -> None:
        rig = Rig(tmp_path, FakeJournal())
        other: Dispatcher | None = None
        try:
            dispatcher = await rig.sized_dispatcher(1)
            their_journal = FakeJournal()
            endpoint = RunnerEndpoint("r1", rig.runners["r1"].address)
            other = Dispatcher(
                their_journal,
                [endpoint],
                TIMINGS,
                ChangeFeed(),
                runner_credentials=rig.credentials,
            )
            await other.start()
            record, event = new_operation({"sleep_ms": "3000"})
            await their_journal.submit(record, event)
            other.wake(theirs := record.operation_id)
            await _poll(lambda: _state(their_journal, theirs), OpState.RUNNING)
            scheduler = dispatcher.room.scheduler
            await _poll(lambda: scheduler.in_use("r1", TurnKind.WRITABLE), 1)  # reported
            mine = await rig.submit(max_attempts=1)
            for _ in range(100):  # bounded: 5 s, until it is parked waiting for the slot
                if scheduler.waiting():
                    break
                await asyncio.sleep(0.05)
            waiting = await rig.journal.get(mine)
            assert waiting is not None and waiting.state is OpState.QUEUED
            assert waiting.attempt_count == 0 and scheduler.holding(mine)
            held = await their_journal.get(theirs)
            assert held is not None and held.state is OpState.RUNNING, "freed too soon"
            done = await rig.terminal(mine)
            assert done.state is OpState.SUCCEEDED and done.attempt_count == 1
            attempts = await rig.journal.attempts(mine)
            assert [a.outcome for a in attempts] == [AttemptOutcome.ACCEPTED]
            await _poll(lambda: _state(their_journal, theirs), OpState.SUCCEEDED)
            assert rig.starts()[mine] == 1 and rig.starts()[theirs] == 1
        finally:
            if other is not None:
                await other.stop()
            await rig.close()

    asyncio.run(scenario())


async def _state(journal: FakeJournal, operation_id: str) -> OpState | None:
    record = await journal.get(operation_id)
    return record.state if record is not None else None


async def _poll(read: Callable[[], object], expected: object) -> None:
    """Until ``read()`` (awaited if need be) gives ``expected``; bounded: 15 s."""
    value: object = None
    for _ in range(300):
        value = read()
        if inspect.isawaitable(value):
            value = await value
        if value == expected:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never became {expected!r}; last {value!r}")
