"""Test helper: giving up asks for a tombstone first (C14, ``attempting.give_up``)."""

from __future__ import annotations

from coordinator_svc.core import commands as cmd
from coordinator_svc.core.decision import Context, Decision
from coordinator_svc.core.events import CancelFailed
from coordinator_svc.core.model import OperationRecord
from tests.coordinator.core.scenario import step


def without_tombstone(
    record: OperationRecord, decision: Decision, context: Context
) -> tuple[OperationRecord, Decision]:
    """The decision gave up with one Cancel (nothing written yet); that Cancel gets
    no answer, so the operation ends as it would have without it."""
    assert decision.change is None, decision
    (cancel,) = decision.commands
    assert isinstance(cancel, cmd.Cancel) and cancel.give_up is not None
    failed = CancelFailed(cancel.runner, "", detail="no answer", give_up=cancel.give_up)
    return step(record, failed, context)
