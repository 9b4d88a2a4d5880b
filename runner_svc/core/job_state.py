"""One job as the lifecycle machine knows it (core/job_lifecycle.py): its phase,
what it holds in memory, and how a job is made by its admission.

Split from job_lifecycle.py so the launch (core/job_launch.py) and the rest of
the machine share these values without importing each other. Plain frozen
values and one helper that asks for a settlement; no decision lives here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from runner_svc.core.job_events import Command, WriteSettlement
from runner_svc.core.model import Execution, StopReason
from runner_svc.core.settlement import SettlementDecision
from turnwire.retry_policy import RetryRule


class Phase(enum.StrEnum):
    ADMITTED = "ADMITTED"  # holds its slot; the launch check is still to come
    # Admitted with its launch intent in the same commit (R3, R4): the intent is
    # durable and the executor's start is still to come (StartDue).
    READY = "READY"
    LAUNCHING = "LAUNCHING"  # the launch check passed; the launch intent is being written
    STARTING = "STARTING"  # the launch intent is durable; the executor is being started
    RUNNING = "RUNNING"  # the executor started; its outcome is awaited
    SETTLING = "SETTLING"  # the job's own settlement is decided and being written
    # An execution failed with effect NONE and its end is durable (or being
    # written); the next one starts when the retry timer fires (R15).
    BACKOFF = "BACKOFF"
    SETTLED = "SETTLED"  # the settlement is durable and the slot given back
    RELEASED = "RELEASED"  # nothing of ours launched: the slot given back, nothing to settle
    HELD = "HELD"  # the job's run is over without a durable settlement: slot held (R7)


# Phases after which nothing more happens to the job: its slot is back in the pool.
FINAL_PHASES = frozenset({Phase.SETTLED, Phase.RELEASED})


@dataclass(frozen=True)
class JobState:
    """One job as the machine knows it; the shell keeps it and replaces it each step."""

    incarnation_id: str
    deadline: float | None = None  # limits.deadline, unix seconds
    budget_seconds: float | None = None  # limits.budget_ms, counted from the start
    # limits.heartbeat_timeout (R12): the longest the executor may go without a
    # heartbeat once started; None when the turn requires none.
    heartbeat_seconds: float | None = None
    phase: Phase = Phase.ADMITTED
    # R6: the first reason wins. Kept here always; written durably when the
    # machine says so (WriteStopReason), which is not every time (see step).
    stop_reason: StopReason | None = None
    started_at: float | None = None
    # The start confirmation is queued (WriteConfirmStart) and the outcome not in
    # yet: an outcome that comes now withdraws it (WithdrawConfirmStart).
    confirmation_queued: bool = False
    # When the limit timer is armed to wake next (deadline, budget, heartbeat);
    # None once a limit stopped the turn, or when it has none.
    limit_alarm: float | None = None
    settlement_pending: bool = False  # a WriteSettlement awaits its answer
    result_not_saved: bool = False  # a write the turn's truth needed failed: slot held (R7)
    # R15: the turn's retry policy (None: one execution), the current
    # execution's number (0 before the first launch intent) and start, and
    # when the next execution may start while in BACKOFF.
    retry: RetryRule | None = None
    execution_number: int = 0
    execution_started_at: float | None = None
    retry_at: float | None = None
    retry_reason: str = ""

    @property
    def slot_held(self) -> bool:
        return self.phase not in FINAL_PHASES

    @property
    def executor_live(self) -> bool:
        """The job started an executor and has not finished with it: a stop is passed
        on (one that already finished ignores it: ExecutionHandle.cancel contract)."""
        return self.started_at is not None and self.phase in (Phase.RUNNING, Phase.SETTLING)


def admitted(
    incarnation_id: str,
    *,
    deadline: float | None,
    budget_seconds: float | None,
    heartbeat_seconds: float | None = None,
    draining: bool = False,
    retry: RetryRule | None = None,
    with_intent: bool = False,
) -> JobState:
    """A job fresh from admission (R4). One admitted while the runner began to
    drain carries SHUTDOWN (in memory), so it never launches: its launch check
    settles it unlaunched. ``with_intent``: the admission wrote the launch intent
    of execution 1 too (``Admission.with_intent``), so the job is READY: no launch
    check, no intent of its own, the start is next (R3)."""
    return JobState(
        incarnation_id,
        deadline=deadline,
        budget_seconds=budget_seconds,
        heartbeat_seconds=heartbeat_seconds,
        phase=Phase.READY if with_intent else Phase.ADMITTED,
        stop_reason=StopReason.SHUTDOWN if draining else None,
        retry=retry,
        execution_number=1 if with_intent else 0,
    )


Step = tuple[JobState, tuple[Command, ...]]


def settle(
    state: JobState,
    decision: SettlementDecision,
    execution: Execution,
    *,
    started_at: float | None = None,
    current: Execution | None = None,
) -> Step:
    """Ask for the settlement (R7); its answer (SettlementWritten) frees the slot."""
    command = WriteSettlement(decision, execution, started_at=started_at, current_execution=current)
    return replace(state, settlement_pending=True), (command,)
