"""C1a (issue 10): a turn that can be sent at once is stored with its first attempt
written ahead, in the acceptance's own transaction, against a real runner and a
real SQLite journal; and everywhere it cannot, it is stored QUEUED as before."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from coordinator_svc.core.model import AttemptOutcome, Change, OperationRecord, OpState, TurnKind
from coordinator_svc.ports import Journal, JournalUnavailable
from coordinator_svc.storage.sql import SqlJournal
from turnwire.testing.dispatcher_rig import Rig, new_operation, sqlite_journal


def transactions(journal: Journal) -> int:
    assert isinstance(journal, SqlJournal)
    return journal.write_transactions


@pytest.mark.rule("C1a", "C4", "C2a", "C13")
def test_a_turn_sent_at_once_is_stored_with_its_first_attempt_in_one_transaction(
    tmp_path: Path,
) -> None:
    """C1a, C4: the acceptance's one COMMIT holds the turn DISPATCHING with attempt 1
    bound to the incarnation the watch knows (no preflight, C2a); events QUEUED then
    DISPATCHING (C13); the turn runs once."""

    async def scenario() -> None:
        rig = Rig(tmp_path, sqlite_journal(tmp_path / "journal.db"))
        try:
            dispatcher = await rig.sized_dispatcher(slots=2)
            known = await rig.watching("r1")
            record, event = new_operation({"output": "hi"})
            before = transactions(rig.journal)
            stored, replayed = await rig.accept(record, event)
            assert transactions(rig.journal) - before == 1
            assert not replayed
            assert stored.state is OpState.DISPATCHING
            assert (stored.attempt_count, stored.runner) == (1, "r1")
            assert stored.incarnation_id == known.incarnation_id
            events = await rig.journal.events(record.operation_id, 0, 10)
            assert [(e.sequence, e.to_state) for e in events[:2]] == [
                (1, OpState.QUEUED),
                (2, OpState.DISPATCHING),
            ]
            done = await rig.terminal(record.operation_id)
            assert done.state is OpState.SUCCEEDED
            assert rig.starts()[record.operation_id] == 1
            assert dispatcher.metrics.rpc_calls["GetOperationStatus"] == 0
            assert dispatcher.metrics.first_attempts_with_acceptance == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C1a", "C1", "C4")
def test_with_queue_before_first_attempt_the_turn_is_stored_queued_alone(
    tmp_path: Path,
) -> None:
    """C1a off (the operator's switch): acceptance (C1) and write-ahead (C4) are two
    commits again."""

    async def scenario() -> None:
        rig = Rig(tmp_path, sqlite_journal(tmp_path / "journal.db"))
        try:
            dispatcher = await rig.sized_dispatcher(slots=2, queue_before_first_attempt=True)
            await rig.watching("r1")
            record, event = new_operation({"output": "hi"})
            before = transactions(rig.journal)
            stored, _ = await rig.accept(record, event)
            assert stored.state is OpState.QUEUED
            assert transactions(rig.journal) - before == 1
            done = await rig.terminal(record.operation_id)
            assert done.state is OpState.SUCCEEDED
            assert done.attempt_count == 1
            assert dispatcher.metrics.first_attempts_with_acceptance == 0
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C1a", "C6a")
def test_a_turn_with_no_free_slot_is_stored_queued_and_runs_when_one_frees(
    tmp_path: Path,
) -> None:
    """C1a, C6a: one slot, taken: the next turn is not routed at acceptance; it waits
    QUEUED with no attempt and runs after the first settles, once."""

    async def scenario() -> None:
        rig = Rig(tmp_path, sqlite_journal(tmp_path / "journal.db"))
        try:
            dispatcher = await rig.sized_dispatcher(slots=1)
            await rig.watching("r1")
            # Long enough that the slot is still taken at the next acceptance on a busy box.
            slow, slow_event = new_operation({"sleep_ms": "1500"})
            first, _ = await rig.accept(slow, slow_event)
            assert first.state is OpState.DISPATCHING
            record, event = new_operation({"output": "next"})
            stored, _ = await rig.accept(record, event)
            assert stored.state is OpState.QUEUED
            assert stored.attempt_count == 0
            for op_id in (slow.operation_id, record.operation_id):
                assert (await rig.terminal(op_id)).state is OpState.SUCCEEDED
                assert rig.starts()[op_id] == 1
            assert dispatcher.metrics.first_attempts_with_acceptance == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


@pytest.mark.rule("C1a", "C1")
def test_a_replayed_key_sends_nothing_new_and_gives_the_slot_back(tmp_path: Path) -> None:
    """C1a, C1 (idempotency): a submit whose key is known stores nothing of the new
    turn: its attempt's compare-and-set finds no row, no Dispatch is sent for it, the
    slot it was given at acceptance is free again, and nothing of it stays in memory
    (a flood of replays must not grow the coordinator)."""

    async def scenario() -> None:
        rig = Rig(tmp_path, sqlite_journal(tmp_path / "journal.db"))
        try:
            dispatcher = await rig.sized_dispatcher(slots=2)
            await rig.watching("r1")
            record, event = new_operation({"output": "hi"})
            await rig.accept(record, event)
            assert (await rig.terminal(record.operation_id)).state is OpState.SUCCEEDED
            dispatches = dispatcher.metrics.rpc_calls["Dispatch"]
            again, again_event = new_operation({"output": "hi"})
            again = dataclasses.replace(
                again,
                idempotency_key_digest=record.idempotency_key_digest,
                request_digest=record.request_digest,
            )
            stored, replayed = await rig.accept(again, again_event)
            assert replayed
            assert stored.operation_id == record.operation_id
            assert await rig.journal.get(again.operation_id) is None
            assert again.operation_id not in dispatcher.deadlines  # nothing kept for it
            assert dispatcher.metrics.rpc_calls["Dispatch"] == dispatches
            assert dispatcher.room.scheduler.in_use("r1", TurnKind.WRITABLE) == 0
            assert dispatcher.metrics.first_attempts_with_acceptance == 1
        finally:
            await rig.close()

    asyncio.run(scenario())


@dataclasses.dataclass
class FirstAttemptWriteFails:
    """The real journal, except that the first write ahead of an attempt fails
    as a database outage would (fail closed: nothing written)."""

    inner: Journal
    failed: int = 0

    async def commit(self, change: Change) -> OperationRecord:
        if change.new_attempt is not None and not self.failed:
            self.failed += 1
            raise JournalUnavailable("journal database error: injected")
        return await self.inner.commit(change)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.rule("C1a", "C4")
def test_a_failed_attempt_write_leaves_the_turn_queued_and_it_runs_once(tmp_path: Path) -> None:
    """C1a, C4 (fail closed): the acceptance commits; the attempt written with it does
    not: the turn is stored QUEUED, its slot given back, and a grant dispatches it as
    usual."""

    async def scenario() -> None:
        failing = FirstAttemptWriteFails(sqlite_journal(tmp_path / "journal.db"))
        rig = Rig(tmp_path, failing)  # type: ignore[arg-type]
        try:
            dispatcher = await rig.sized_dispatcher(slots=1)
            await rig.watching("r1")
            record, event = new_operation({"output": "hi"})
            stored, replayed = await rig.accept(record, event)
            assert failing.failed == 1
            assert not replayed
            assert stored.state is OpState.QUEUED
            done = await rig.terminal(record.operation_id)
            assert done.state is OpState.SUCCEEDED
            assert rig.starts()[record.operation_id] == 1
            attempts = await rig.journal.attempts(record.operation_id)
            assert [a.outcome for a in attempts] == [AttemptOutcome.ACCEPTED]
            assert dispatcher.metrics.first_attempts_with_acceptance == 0
        finally:
            await rig.close()

    asyncio.run(scenario())
