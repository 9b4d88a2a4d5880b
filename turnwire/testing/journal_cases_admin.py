"""Conformance cases: the operator's records (``ports.AdminJournal``, PROTOCOL.md §10).

Part of ``JournalConformance``; run them through it (see ``turnwire.testing``).
Verdicts and requeue links live beside the operations: every case also
checks that the operation's row and events are exactly as before (V1).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import cast

import pytest

from coordinator_svc.core.model import EventRecord, Execution, OperationRecord, OpState
from coordinator_svc.core.operator import (
    DrainRecord,
    OperationFilter,
    RequeueRecord,
    Verdict,
    VerdictRecord,
    requeue_key_digest,
)
from coordinator_svc.ports import AdminJournal, InvalidWrite, Journal, PageCursor
from turnwire.testing.journal_store import JournalCases, JournalStore
from turnwire.testing.records import T0, dispatch, new_operation, submitted, transition


def _admin(journal: Journal) -> AdminJournal:
    if not isinstance(journal, AdminJournal):
        pytest.fail(f"{type(journal).__name__} is not a ports.AdminJournal", pytrace=False)
    return cast(AdminJournal, journal)


async def _ended(journal: Journal, number: int, execution: Execution) -> OperationRecord:
    """Operation ``number``: dispatched, then TIMED_OUT with ``execution``."""
    stored = await submitted(journal, number)
    sent = await journal.commit(dispatch(stored))
    unknown = await journal.commit(transition(sent, OpState.DISPATCH_UNKNOWN))
    return await journal.commit(
        transition(
            unknown,
            OpState.TIMED_OUT,
            execution=execution,
            finished_at=unknown.updated_at + timedelta(seconds=1),
            error_reason="RECONCILE_DEADLINE",
        )
    )


def _verdict(
    op_id: str, verdict: Verdict, by: str = "ops", reason: str = "billing log"
) -> VerdictRecord:
    return VerdictRecord(op_id, verdict, by, reason, T0 + timedelta(minutes=5))


def _requeue_of(
    original: OperationRecord, number: int
) -> tuple[RequeueRecord, OperationRecord, EventRecord]:
    made = new_operation(
        number,
        principal=original.principal,
        request=None,
        created_at=T0 + timedelta(minutes=10),
    )
    made = dataclasses.replace(
        made,
        idempotency_key_digest=requeue_key_digest(original.operation_id),
        request_digest=original.request_digest,
    )
    link = RequeueRecord(original.operation_id, made.operation_id, "ops", "retry it", T0)
    event = EventRecord(made.operation_id, 1, None, OpState.QUEUED, made.execution, made.created_at)
    return link, made, event


class AdminCases(JournalCases):
    """Verdicts, requeue links, drains and the all-principal listing."""

    def test_verdict_is_stored_once_beside_an_unchanged_operation(
        self, journal_store: JournalStore
    ) -> None:
        """V1-V3: the first verdict is kept; asking again (same or other) returns it."""

        async def scenario(journal: Journal) -> None:
            admin = _admin(journal)
            ended = await _ended(journal, 1, Execution.UNKNOWN)
            events = await journal.events(ended.operation_id, 0, 100)
            first = _verdict(ended.operation_id, Verdict.NOT_EXECUTED)
            assert await admin.record_verdict(first) == (first, True)
            assert await admin.record_verdict(first) == (first, False)
            other = _verdict(ended.operation_id, Verdict.EXECUTED, by="someone-else")
            assert await admin.record_verdict(other) == (first, False)
            assert await admin.verdicts(ended.operation_id) == [first]
            notes = await admin.operator_notes([ended.operation_id, "op-9999"])
            assert list(notes) == [ended.operation_id]
            assert notes[ended.operation_id].verdict == first
            assert await journal.get(ended.operation_id) == ended
            assert await journal.events(ended.operation_id, 0, 100) == events

        journal_store.run(scenario)

    def test_verdict_refused_unless_terminal_and_unknown(self, journal_store: JournalStore) -> None:
        """V2: no verdict on a live operation, a known execution or no operation."""

        async def scenario(journal: Journal) -> None:
            admin = _admin(journal)
            live = await submitted(journal, 1)
            known = await _ended(journal, 2, Execution.NOT_STARTED)
            for op_id in (live.operation_id, known.operation_id, "op-9999"):
                with pytest.raises(InvalidWrite):
                    await admin.record_verdict(_verdict(op_id, Verdict.EXECUTED))
                assert await admin.verdicts(op_id) == []
            assert await admin.operator_notes([live.operation_id, known.operation_id]) == {}

        journal_store.run(scenario)

    def test_requeue_stores_a_linked_operation_once(self, journal_store: JournalStore) -> None:
        """V5/V6: a NOT_STARTED original is requeued once; the links go both ways."""

        async def scenario(journal: Journal) -> None:
            admin = _admin(journal)
            original = await _ended(journal, 1, Execution.NOT_STARTED)
            link, made, event = _requeue_of(original, 2)
            stored, replayed = await admin.requeue(link, made, event)
            assert not replayed and stored.operation_id == made.operation_id
            assert stored.state is OpState.QUEUED and stored.last_event_sequence == 1
            assert await journal.get(made.operation_id) == stored
            assert [e.sequence for e in await journal.events(made.operation_id, 0, 10)] == [1]
            again_link, again, again_event = _requeue_of(original, 3)
            assert await admin.requeue(again_link, again, again_event) == (stored, True)
            assert await journal.get(again.operation_id) is None
            notes = await admin.operator_notes([original.operation_id, made.operation_id])
            assert notes[original.operation_id].requeued_as == made.operation_id
            assert notes[made.operation_id].requeued_from == original.operation_id
            assert await journal.get(original.operation_id) == original

        journal_store.run(scenario)

    def test_requeue_refused_unless_proven_not_run(self, journal_store: JournalStore) -> None:
        """V5: STARTED, or UNKNOWN without a NOT_EXECUTED verdict, is never requeued;
        a NOT_EXECUTED verdict makes an UNKNOWN one requeueable."""

        async def scenario(journal: Journal) -> None:
            admin = _admin(journal)
            started = await _ended(journal, 1, Execution.STARTED)
            unknown = await _ended(journal, 2, Execution.UNKNOWN)
            executed = await _ended(journal, 3, Execution.UNKNOWN)
            await admin.record_verdict(_verdict(executed.operation_id, Verdict.EXECUTED))
            live = await submitted(journal, 4)
            for number, original in enumerate((started, unknown, executed, live), start=10):
                link, made, event = _requeue_of(original, number)
                with pytest.raises(InvalidWrite):
                    await admin.requeue(link, made, event)
                assert await journal.get(made.operation_id) is None
            await admin.record_verdict(_verdict(unknown.operation_id, Verdict.NOT_EXECUTED))
            link, made, event = _requeue_of(unknown, 20)
            assert (await admin.requeue(link, made, event))[1] is False

        journal_store.run(scenario)

    def test_drain_is_kept_until_undrained(self, journal_store: JournalStore) -> None:
        """V8: one drain per runner (the first reason stands) until undrain removes it."""

        async def scenario(journal: Journal) -> None:
            admin = _admin(journal)
            first = DrainRecord("runner-b", "ops", "disk swap", T0)
            assert await admin.drain(first) == (first, True)
            assert await admin.drain(DrainRecord("runner-b", "x", "other", T0)) == (first, False)
            assert await admin.drain(DrainRecord("runner-a", "ops", "why", T0)) is not None
            assert [d.runner for d in await admin.drains()] == ["runner-a", "runner-b"]
            assert await admin.undrain("runner-b") == first
            assert await admin.undrain("runner-b") is None
            assert [d.runner for d in await admin.drains()] == ["runner-a"]

        journal_store.run(scenario)

    def test_list_operations_filters_every_principal_and_pages(
        self, journal_store: JournalStore
    ) -> None:
        """The all-principal listing: filters ANDed, (created_at, id) order, a cursor."""

        async def scenario(journal: Journal) -> None:
            admin = _admin(journal)
            await submitted(journal, 1, principal="alice")
            await submitted(journal, 2, principal="bob")
            decided = await _ended(journal, 3, Execution.UNKNOWN)
            open_ = await _ended(journal, 4, Execution.UNKNOWN)
            await admin.record_verdict(_verdict(decided.operation_id, Verdict.EXECUTED))
            everyone = await admin.list_operations(OperationFilter(), 10, None)
            assert [r.operation_id for r in everyone] == [
                "op-0001",
                "op-0002",
                "op-0003",
                "op-0004",
            ]
            bobs = await admin.list_operations(OperationFilter(principal="bob"), 10, None)
            assert [r.operation_id for r in bobs] == ["op-0002"]
            unknown = OperationFilter(executions=(Execution.UNKNOWN,), runner="runner-a")
            assert len(await admin.list_operations(unknown, 10, None)) == 2
            undecided = OperationFilter(executions=(Execution.UNKNOWN,), without_verdict=True)
            found = await admin.list_operations(undecided, 10, None)
            assert [r.operation_id for r in found] == [open_.operation_id]
            queued = OperationFilter(states=(OpState.QUEUED,), pool="default")
            page = await admin.list_operations(queued, 1, None)
            assert [r.operation_id for r in page] == ["op-0001"]
            cursor = PageCursor(page[0].created_at, page[0].operation_id)
            rest = await admin.list_operations(queued, 10, cursor)
            assert [r.operation_id for r in rest] == ["op-0002"]

        journal_store.run(scenario)
