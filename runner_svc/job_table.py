"""The job table's values: one admitted job's record, and waiting for jobs to end.

Split from runner_svc/jobs.py (the shell) so it stays about performing; no
decision lives here (core/job_lifecycle.py makes them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from runner_svc.core.job_lifecycle import JobState
from runner_svc.core.model import SlotKind
from runner_svc.executors import ExecutionHandle
from runner_svc.storage.async_store import QueuedWrite
from turnwire.runner.v1 import runner_pb2


@dataclass
class Job:
    """One admitted operation while it holds a slot: its machine state and its I/O."""

    operation_id: str
    kind: SlotKind
    attempt: int
    envelope: runner_pb2.TurnEnvelope
    envelope_bytes: bytes
    state: JobState
    handle: ExecutionHandle | None = None
    # The start confirmation queued behind the store's writer (WriteConfirmStart).
    confirmation: QueuedWrite | None = None
    # When the limit timer next wakes (set by ArmLimitTimer, taken by the watchdog).
    limit_alarm: float | None = None
    # The executor's latest sign of life (a heartbeat or a chunk, R12), unix
    # seconds; written from executor threads (one float: atomic in CPython).
    last_heartbeat: float | None = None
    task: asyncio.Task[None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    # R15: when the next execution may start (ArmRetryTimer), and the wake-up
    # for the wait (a Cancel or the drain settles the job while it waits).
    retry_alarm: float | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def result_not_saved(self) -> bool:
        return self.state.result_not_saved


def pending(jobs: Mapping[str, Job]) -> list[Job]:
    """The jobs whose run has not ended."""
    return [job for job in jobs.values() if not job.done.is_set()]


async def wait_all(jobs: Mapping[str, Job], seconds: float) -> bool:
    """Wait up to ``seconds`` for every job's run to end; False if some did not."""
    deadline = time.monotonic() + seconds
    while waiting := pending(jobs):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        waits = [asyncio.ensure_future(job.done.wait()) for job in waiting]
        _, not_done = await asyncio.wait(waits, timeout=remaining)
        for waiter in not_done:
            waiter.cancel()
    return True
