"""The metered executor: a built-in that records every start in a ledger.

Before any work, `start` appends one durable line (turnwire.ledger) with the
operation_id, incarnation_id, attempt, this process's pid and the UTC start
time; then it behaves exactly like echo by the same parameters ("sleep_ms",
"fail", "output"; see runner_svc.executors.builtin). Bad parameters are
refused before the ledger line is written, so the ledger never counts a start
that could not happen. The ledger counts what may have been billed: a crash
between the append and the runner's start confirmation still leaves the line.
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path

from runner_svc.executors import builtin
from runner_svc.executors.base import ExecutionRequest, ExecutorStartError
from runner_svc.executors.in_process import InProcessExecution
from turnwire.ledger import LedgerEntry, append_start


class MeteredExecutor:
    """echo/sleep/fail by parameters, with one ledger line per start."""

    name = "metered"

    def __init__(self, ledger_path: Path) -> None:
        self.ledger_path = ledger_path
        self._behaviour = builtin.echo()

    async def start(self, request: ExecutionRequest) -> InProcessExecution:
        knobs = self._behaviour.knobs_for(request)
        entry = LedgerEntry(
            operation_id=request.operation_id,
            incarnation_id=request.incarnation_id,
            attempt=request.attempt,
            execution=request.execution,
            pid=os.getpid(),
            started_at=datetime.now(UTC).isoformat(),
        )
        try:
            # fsync blocks; keep it off the event loop.
            await asyncio.to_thread(append_start, self.ledger_path, entry)
        except (OSError, ValueError) as error:
            raise ExecutorStartError(f"metered: cannot write the ledger: {error}") from error
        return await builtin.run_builtin(request, knobs)
