"""Admission (R2, R3, R4, R5, §5, §6): what to do with a Dispatch, decided in one step.

The shell loads the operation's row (if any), then asks :func:`decide_admission`
with the runner's slot pools; the answer is one instruction. Reserving the slot
is part of the same synchronous step (``SlotPools.reserve``), so two Dispatches
can never both take the last slot, and a failed write gives it back.

An admitted turn that launches at once (nothing could block its launch check,
R3) is written with its launch intent in the admission's own commit
(``Admission.with_intent``, issue 27): one durable commit before the executor
starts instead of two.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from runner_svc.core.model import (
    DEFAULT_EXECUTOR,
    OperationRow,
    Refusal,
    RowState,
    RunnerRefusal,
    SlotKind,
    StopReason,
)
from runner_svc.core.settlement import due_stop_reason
from runner_svc.core.witness import StoreOpening, vouches


class AdmissionAction(enum.Enum):
    ADMIT = "ADMIT"  # new id: reserve, write the row, reply, launch
    TAKE_OVER = "TAKE_OVER"  # earlier incarnation's never-launched row (§6)
    DUPLICATE = "DUPLICATE"  # known id: reply its status, start nothing (R2)


@dataclass(frozen=True)
class DispatchFacts:
    """What the shell knows about a Dispatch once its envelope parsed."""

    operation_id: str
    envelope_digest: str
    expected_incarnation_id: str
    fencing_token: int
    kind: SlotKind
    # The executor the envelope names ("default" when it names none, R14).
    executor: str = DEFAULT_EXECUTOR
    # The envelope's limits.deadline, unix seconds; None when it has none (R6).
    deadline: float | None = None


@dataclass(frozen=True)
class Admission:
    action: AdmissionAction
    raise_fencing_token: bool = False
    # R3, R4: the row is written with its launch intent (execution 1) in the
    # admission's own commit, and the job starts the executor right after it
    # lands, with no launch check and no write of its own (issue 27).
    with_intent: bool = False


def check_incarnation(expected: str, ours: str) -> None:
    """C5: a call bound to another incarnation is refused before anything else."""
    if expected != ours:
        raise RunnerRefusal(
            Refusal.INCARNATION_MISMATCH,
            f"this runner is incarnation {ours}, the call expected {expected or '(none)'}",
        )


def check_fencing_token(row: OperationRow | None, token: int) -> None:
    """§5: a token lower than the highest seen for the operation is refused."""
    if row is not None and token < row.fencing_token:
        raise RunnerRefusal(
            Refusal.STALE_FENCING_TOKEN,
            f"fencing token {token} is lower than {row.fencing_token} already seen",
        )


def decide_admission(
    facts: DispatchFacts,
    row: OperationRow | None,
    *,
    incarnation_id: str,
    accepting: bool,
    pools: SlotPools,
    now: float,
    openings: Sequence[StoreOpening] = (),
    executors: Collection[str] = (DEFAULT_EXECUTOR,),
) -> Admission:
    """The one admission decision; raises RunnerRefusal for every refusal.
    ``now``: the runner's clock; ``openings``: the store's chain (§6 witness),
    newest first; ``executors``: the names of the executors this runner serves (R14)."""
    check_incarnation(facts.expected_incarnation_id, incarnation_id)
    check_fencing_token(row, facts.fencing_token)
    raise_token = row is not None and facts.fencing_token > row.fencing_token
    if row is not None:
        if row.state is RowState.TOMBSTONED:
            raise RunnerRefusal(
                Refusal.CANCELLED_BEFORE_DISPATCH,
                f"{facts.operation_id} was cancelled before its Dispatch arrived",
            )
        if row.envelope_digest != facts.envelope_digest:
            raise RunnerRefusal(
                Refusal.ENVELOPE_MISMATCH,
                f"{facts.operation_id} is known with envelope digest {row.envelope_digest}",
            )
        if not _needs_take_over(row, incarnation_id, openings):
            return Admission(AdmissionAction.DUPLICATE, raise_fencing_token=raise_token)
    check_executor_served(facts.executor, executors)
    _check_open_and_free(facts, accepting=accepting, pools=pools)
    action = AdmissionAction.ADMIT if row is None else AdmissionAction.TAKE_OVER
    return Admission(
        action, raise_fencing_token=raise_token, with_intent=launches_at_once(facts, now)
    )


def launches_at_once(facts: DispatchFacts, now: float) -> bool:
    """R3, R4: whether the launch check would pass the moment the admitted row lands.
    The row written is this incarnation's and ACCEPTED with no stop reason (a new
    row has none; a take-over clears the earlier process's shutdown, §6), and the
    runner is open (or the Dispatch was refused), so only a deadline already passed
    can block the launch. Such a turn is admitted alone: its launch check then
    settles it unlaunched, TIMED_OUT, NOT_STARTED (C14)."""
    late = due_stop_reason(now=now, deadline=facts.deadline, started_at=None, budget_seconds=None)
    return late is None


def _needs_take_over(
    row: OperationRow, incarnation_id: str, openings: Sequence[StoreOpening]
) -> bool:
    """§6: an earlier incarnation's accepted, never-launched row that nobody
    asked to stop. A `shutdown` stop reason stopped that process, not the turn
    (a runner killed mid-drain leaves it): such a row is re-admitted too. Only
    when the store's chain vouches that the row is that incarnation's last word
    on it: a restored store may show "accepted" for a turn that went on to run."""
    return (
        row.state is RowState.ACCEPTED
        and row.incarnation_id != incarnation_id
        and row.stop_reason in (None, StopReason.SHUTDOWN)
        and vouches(openings, row.incarnation_id, row.dispatch_stamp)
    )


def check_executor_served(executor: str, executors: Collection[str]) -> None:
    """R14: a turn for an executor this runner does not serve is refused before
    anything is written or reserved (definite, C6). A known id is answered as a
    duplicate first (R2): its row was admitted when it was served."""
    if executor not in executors:
        served = ",".join(sorted(executors))
        raise RunnerRefusal(
            Refusal.EXECUTOR_NOT_SERVED,
            f"this runner does not serve executor {executor!r} (it serves: {served or 'none'})",
            {"executor": executor, "served": served},
        )


def _check_open_and_free(facts: DispatchFacts, *, accepting: bool, pools: SlotPools) -> None:
    if not accepting:
        raise RunnerRefusal(Refusal.SHUTTING_DOWN, "the runner is draining and admits nothing")
    if not pools.has_free(facts.kind):
        raise RunnerRefusal(
            Refusal.NO_FREE_SLOT,
            f"all {pools.sizes[facts.kind]} {facts.kind.value} slots are in use",
        )


@dataclass
class SlotPools:
    """Two slot pools (R4). Mutable on purpose: the shell's one reservation ledger.

    No awaits happen between ``has_free`` and ``reserve`` in the shell, so a
    reservation is atomic on the event loop.
    """

    sizes: Mapping[SlotKind, int]
    in_use: dict[SlotKind, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for kind in SlotKind:
            if self.sizes.get(kind, 0) < 0:
                raise ValueError(f"slot pool {kind.value} cannot be negative")
            self.in_use.setdefault(kind, 0)

    def has_free(self, kind: SlotKind) -> bool:
        return self.in_use[kind] < self.sizes.get(kind, 0)

    def reserve(self, kind: SlotKind) -> None:
        if not self.has_free(kind):
            raise RunnerRefusal(Refusal.NO_FREE_SLOT, f"no free {kind.value} slot")
        self.in_use[kind] += 1

    def free(self, kind: SlotKind) -> None:
        if self.in_use[kind] <= 0:
            raise ValueError(f"freeing a {kind.value} slot that was never reserved")
        self.in_use[kind] -= 1
