"""A test executor implementing the executor port, driven step by step by the test.

It lets a test hold an execution at its start or before it settles, observe
what the store says at that moment, and choose the outcome. It implements
runner_svc.executors.base.Executor exactly; nothing is patched.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runner_svc.executors import ExecutionOutcome, ExecutionRequest, ExecutorStartError


def row_state_on_disk(store_path: Path, operation_id: str) -> str | None:
    """The row state as a fresh connection to the file sees it (what survives a crash)."""
    connection = sqlite3.connect(store_path, timeout=5)
    try:
        found = connection.execute(
            "SELECT state FROM runner_operations WHERE operation_id = ?", (operation_id,)
        ).fetchone()
    finally:
        connection.close()
    return found[0] if found else None


@dataclass
class GatedHandle:
    outcome: ExecutionOutcome
    finish: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_requests: int = 0
    finish_on_cancel: bool = True

    async def wait(self) -> ExecutionOutcome:
        await self.finish.wait()
        return self.outcome

    async def cancel(self, grace_seconds: float) -> None:
        self.cancel_requests += 1
        if self.finish_on_cancel and not self.finish.is_set():
            self.outcome = ExecutionOutcome(succeeded=False, error_reason="CANCELLED")
            self.finish.set()


@dataclass
class GatedExecutor:
    """Starts are counted; each start may be held on ``start_gate``."""

    name: str = "gated"
    outcome: object = field(default_factory=lambda: ExecutionOutcome(succeeded=True, output=b"ok"))
    finish_at_once: bool = True
    finish_on_cancel: bool = True
    refuse_start: bool = False
    start_gate: asyncio.Event | None = None
    on_start: Callable[[ExecutionRequest], None] | None = None
    starts: list[str] = field(default_factory=list)
    handles: dict[str, GatedHandle] = field(default_factory=dict)
    start_entered: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self, request: ExecutionRequest) -> GatedHandle:
        self.start_entered.set()
        if self.on_start is not None:
            self.on_start(request)
        if self.start_gate is not None:
            await self.start_gate.wait()
        if self.refuse_start:
            raise ExecutorStartError("gated executor told to refuse")
        self.starts.append(request.operation_id)
        handle = GatedHandle(self.outcome, finish_on_cancel=self.finish_on_cancel)  # type: ignore[arg-type]
        if self.finish_at_once:
            handle.finish.set()
        self.handles[request.operation_id] = handle
        return handle
