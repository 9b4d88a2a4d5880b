"""One memory record per operation (coordinator_svc.driver.memory) and the rules
that read it (driver.attention): what is kept, when it is dropped, and when the
due scan may tick an operation."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from coordinator_svc.core.model import OpState
from coordinator_svc.dispatcher.deadlines import TurnDeadlines
from coordinator_svc.driver.agenda import Agenda
from coordinator_svc.driver.attention import due_scan_ticks
from coordinator_svc.driver.memory import Memory, OperationMemory
from tests.coordinator.core.scenario import NOW, bound, queued

SOON = NOW + timedelta(seconds=5)


def test_a_record_back_at_its_defaults_is_not_kept() -> None:
    """Memory holds only operations something is happening to."""
    memory = Memory()
    memory.update("op_1", routing=True, streak=2)
    assert "op_1" in memory and memory.of("op_1").streak == 2
    memory.update("op_1", routing=False, streak=0)
    assert "op_1" not in memory and len(memory) == 0
    assert memory.of("op_1") == OperationMemory()


def test_an_operations_end_leaves_nothing_of_it_in_memory() -> None:
    """The agenda, the time limits and a drive share one record: a terminal
    commit and the drive's end leave none of it behind."""
    memory = Memory()
    agenda = Agenda(0.1, 1.0, memory)
    deadlines = TurnDeadlines(queue_timeout=30.0, memory=memory)
    record = queued()
    assert deadlines.limits(record)[1] is not None
    agenda.failed(record.operation_id)
    agenda.later(record.operation_id, SOON)
    memory.update(record.operation_id, driving=True)
    ended = dataclasses.replace(bound(OpState.SUCCEEDED), finished_at=NOW)
    agenda.committed(ended, NOW)
    deadlines.forget(record.operation_id)
    memory.update(record.operation_id, driving=False)
    assert len(memory) == 0


@pytest.mark.rule("C6")
def test_the_due_scan_leaves_alone_what_something_else_looks_after() -> None:
    """C6: A waiting timer, a Dispatch reply on the way, the scheduler's hold and a
    grant's routing each keep the due scan off; with none, it ticks."""
    record = bound(OpState.RUNNING)
    free = OperationMemory()
    assert due_scan_ticks(record, free, NOW, owner=None, dispatching=False, held=False)
    for known, dispatching, held in (
        (OperationMemory(not_before=SOON), False, False),
        (free, True, False),
        (free, False, True),
        (OperationMemory(routing=True), False, False),
    ):
        assert not due_scan_ticks(
            record, known, NOW, owner=None, dispatching=dispatching, held=held
        )
    past = OperationMemory(not_before=NOW - timedelta(seconds=1))
    assert due_scan_ticks(record, past, NOW, owner=None, dispatching=False, held=False)


@pytest.mark.rule("O5")
def test_the_due_scan_acts_at_once_on_a_cancel_another_replica_stored() -> None:
    """O5: the owner's due scan ticks a row another replica marked cancelled,
    even while its timer waits; another replica's row is never its to tick."""
    marked = bound(OpState.RUNNING, cancel_requested=True, lease_owner="c1#a")
    waiting = OperationMemory(not_before=SOON)
    assert due_scan_ticks(marked, waiting, NOW, owner="c1#a", dispatching=False, held=False)
    assert not due_scan_ticks(marked, waiting, NOW, owner="c2#b", dispatching=False, held=False)
    unmarked = dataclasses.replace(marked, cancel_requested=False)
    assert not due_scan_ticks(unmarked, waiting, NOW, owner="c1#a", dispatching=False, held=False)
