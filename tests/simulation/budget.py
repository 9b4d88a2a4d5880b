"""Running many seeds: the CI budget and explore.py (the long run) share this loop."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.simulation.simulator import PolicyFactory, SimConfig, run_seed

# The anti-vacuity counters: each must be > 0 across the CI budget, or the
# budget did not exercise what it claims to.
HARD_CASES = {
    "replays (attempt after an unresolved one)": "tag:replay",
    "reconciled without a resend": "tag:reconciled",
    "changed-incarnation ambiguity": "reason:INCARNATION_CHANGED",
    "tombstoned cancels": "cancel:tombstoned",
    "runner restart, store kept": "runner_restart_kept",
    "runner restart, store wiped": "runner_restart_wiped",
    "runner restart, store restored from a copy": "runner_restart_restored",
    "§6 re-admission by a new incarnation": "dispatch:take_over",
    "dedupe of a delivered duplicate Dispatch": "dispatch:duplicate",
    "coordinator crash right after a commit": "coordinator_crash_after_commit",
    "crash between launch intent and start": "crash_after_intent",
    "R3/R4 admissions written with their launch intent (issue 27)": "dispatch:admitted_with_intent",
    "R3 restart between an admission with its intent and the start": (
        "restart:unstarted_admission_intent"
    ),
    "§6 restart leaving a row accepted, never launched (an older release)": (
        "restart:unstarted_accepted"
    ),
    "crash between start and confirmation": "crash_after_start",
    "reconcile deadline": "reason:RECONCILE_DEADLINE",
    "max_attempts reached": "reason:MAX_ATTEMPTS_EXCEEDED",
    "SAFE operations": "policy:SAFE",
    "NEVER_AUTOMATIC operations": "policy:NEVER_AUTOMATIC",
    "definite refusals (no free slot)": "refused:NO_FREE_SLOT",
    "definite refusals (incarnation mismatch)": "refused:INCARNATION_MISMATCH",
    "runner drained (R8)": "refused:SHUTTING_DOWN",
    "§5 lease taken over by another replica": "lease_taken_over",
    "§5 commit refused after the lease was lost": "replica_lease_lost_commit_refused",
    "§5 runner refused a stale fencing token": "refused:STALE_FENCING_TOKEN",
    "§5 O5 a cancel stored for the owner by another replica": "cancel_marked_for_owner",
    "§6.1 a Dispatch below the admission floor refused": "refused:DISPATCH_STALE",
    "C6c: a run of stale refusals ended the turn (a replica's clock behind)": (
        "reason:DISPATCH_STALE"
    ),
    "C2a: a known runner not heard from lately (its first attempt asks first)": "c2a_not_live",
    "C6a: schedules routed by the real scheduler": "scheduled",
    "C6a: grants while another principal waited": "fair:contended",
    "C1a: first attempts written with their acceptance": "first_attempt_with_acceptance",
    "C1a: coordinator crash right after one": "crash_after_first_attempt_with_acceptance",
    "§11: schedules whose runner set changes under load": "membership",
    "§11: runners removed after a drain": "member_remove:done",
    "§11: removals refused (not drained, or turns bound)": "member_remove:refused",
    "§11: runners removed by force": "member_remove_force:done",
    "§11: names added back as a new member": "member_add:done",
    "§11: turns ended RUNNER_REMOVED (M6)": "reason:RUNNER_REMOVED",
    "§11: Dispatches never sent to a non-member (M6)": "not_a_member:Dispatch",
    "R12 a silent executor stopped by its heartbeat timeout": "heartbeat:lapsed",
    "R12 turns ended TIMED_OUT, HEARTBEAT_TIMEOUT": "reason:HEARTBEAT_TIMEOUT",
    "R14 Dispatches refused for an executor not served": "refused:EXECUTOR_NOT_SERVED",
    "R15 failures declared effect NONE": "finish:failed-none",
    "R15 failures declared effect APPLIED": "finish:failed-applied",
    "R15 retries made (an execution after one declared NONE)": "retry:executions",
    "R15 a stop during the retry wait": "retry:stopped_in_backoff",
    "R15 runner restart during a retry wait": "retry:died_in_backoff",
    "R15 crash after a retry's own launch intent": "crash_after_retry_intent",
    "R15 crash between a retry's start and confirmation": "crash_after_retry_start",
}
# Seen in long runs, not required of the CI budget (rare by nature).
RARE_CASES = {
    "§11: RUNNER_REMOVED after a removal without force (the M3 race)": "removed_endings_raced",
}


@dataclass
class BudgetResult:
    schedules: int = 0
    steps: int = 0
    seconds: float = 0.0
    coverage: Counter[str] = field(default_factory=Counter)
    # (seed, violation)
    violations: list[tuple[int, str]] = field(default_factory=list)

    @property
    def schedules_per_second(self) -> float:
        return self.schedules / self.seconds if self.seconds else 0.0

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    def figures(self) -> str:
        return (
            f"{self.schedules} schedules, {self.steps} steps in {self.seconds:.1f}s: "
            f"{self.schedules_per_second:.0f} schedules/s, {self.steps_per_second:.0f} steps/s, "
            f"{len(self.violations)} violations"
        )


def run_budget(
    seeds: range,
    config: SimConfig,
    policy: PolicyFactory | None = None,
    *,
    stop_on_violation: bool = False,
    keep_going: Callable[[], bool] = lambda: True,
    stop_on: Callable[[str], bool] | None = None,
) -> BudgetResult:
    """Run every seed (until ``keep_going`` says stop); never raises on a violation.
    ``stop_on``: stop at the first violation it picks (``stop_on_violation``: any)."""
    result = BudgetResult()
    started = time.perf_counter()
    for seed in seeds:
        if not keep_going():
            break
        run = run_seed(seed, config, policy)
        result.schedules += 1
        result.steps += run.steps + run.heal_steps
        result.coverage.update(run.coverage)
        if run.violation:
            result.violations.append((seed, run.violation))
            if stop_on_violation or (stop_on is not None and stop_on(run.violation)):
                break
    result.seconds = time.perf_counter() - started
    return result
