"""What the public API needs from the dispatcher, as a port.

``coordinator_svc.dispatcher.Dispatcher`` satisfies it structurally; tests can
use a small fake. Keeping the API on this Protocol means the servicer never
reaches into dispatcher internals.
"""

from __future__ import annotations

from typing import Protocol

from coordinator_svc.core.model import OperationRecord, TurnKind


class DispatchControl(Protocol):
    def wake(self, operation_id: str) -> None:
        """Look at this operation soon (it was just accepted or changed)."""
        ...

    async def request_cancel(self, record: OperationRecord) -> OperationRecord:
        """Store a cancel request (C11) and return the record as now stored."""
        ...

    def has_runner_for(self, pool: str, kind: TurnKind) -> bool:
        """Is any configured runner able to serve this pool and kind?"""
        ...
