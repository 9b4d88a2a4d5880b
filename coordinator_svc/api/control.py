"""What the public API needs from the dispatcher, as a port.

``coordinator_svc.dispatcher.Dispatcher`` satisfies it structurally; tests can
use a small fake. Keeping the API on this Protocol means the servicer never
reaches into dispatcher internals.
"""

from __future__ import annotations

from typing import Protocol

from coordinator_svc.core.model import EventRecord, OperationRecord, TurnKind
from coordinator_svc.core.quotas import QuotaRefusal
from coordinator_svc.core.routing import NoRunnerForExecutor
from coordinator_svc.ports import Submit


class DispatchControl(Protocol):
    async def store_accepted(
        self, record: OperationRecord, event: EventRecord, submit: Submit
    ) -> tuple[OperationRecord, bool]:
        """C1's write of a new turn: ``submit(record, event)`` (journal.submit),
        returning what it returns. The dispatcher may write the turn's first
        attempt in the same transaction and send it (issue 10): the record
        returned is then DISPATCHING, and is being driven already."""
        ...

    def accepted(self, record: OperationRecord) -> None:
        """A turn was just accepted and stored QUEUED: schedule it."""
        ...

    def quota_check(self, principal: str) -> QuotaRefusal | None:
        """May ``principal`` submit one more turn now? None if so (a submit
        token is taken); else which limit refuses and when to retry."""
        ...

    def quota_refund(self, principal: str) -> None:
        """The submit that took a token was a retry of an accepted turn."""
        ...

    def waiting_for(self, record: OperationRecord) -> str:
        """What a non-terminal operation waits for right now, in words ("" if nothing)."""
        ...

    async def request_cancel(self, record: OperationRecord) -> OperationRecord:
        """Store a cancel request (C11) and return the record as now stored."""
        ...

    def has_runner_for(self, pool: str, kind: TurnKind) -> bool:
        """Is any configured runner able to serve this pool and kind?"""
        ...

    def executor_refusal(
        self, pool: str, kind: TurnKind, executor: str
    ) -> NoRunnerForExecutor | None:
        """C6b: is it proven that no runner of this pool and kind serves
        ``executor`` (every one has said what it serves)? None if not."""
        ...
