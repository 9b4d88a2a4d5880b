"""What a run leaves behind: coverage counters and an operation's history."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.simulation.world import describe

if TYPE_CHECKING:
    from tests.simulation.simulator import Simulator


def count_coverage(sim: Simulator) -> None:
    coverage = sim.coverage
    coverage["schedules"] += 1
    if len(sim.coordinators) > 1:
        coverage["schedules_with_two_replicas"] += 1
    if sim.setup.scheduled:
        coverage["scheduled"] += 1
        coverage["scheduler_grants"] += sim.checker.grants
        coverage["fair:contended"] += sim.checker.contended_grants
    if sim.checker.membership is not None:
        coverage["membership"] += 1
        coverage["removed_endings_raced"] += sim.checker.membership.raced_endings

    for coordinator in sim.coordinators.values():
        coverage.update({f"tag:{k}": v for k, v in coordinator.tags.items()})
        coverage["alarms"] += len(coordinator.alarms)
        coverage.update(coordinator.counters)
    for runner in sim.runners.values():
        coverage.update(runner.counters)
    for record in sim.journal.operations.values():
        coverage[f"final:{record.state.value}"] += 1
        if record.state.terminal:
            coverage[f"final_execution:{record.execution.value}"] += 1
        if record.error_reason:
            coverage[f"reason:{record.error_reason}"] += 1
        if record.attempt_count > 1:
            coverage["multi_attempt"] += 1
        if record.fencing_token > 1:
            coverage["lease_taken_over"] += 1
    coverage["executions"] += len(sim.ledger.entries)
    for op, kind in sim.ledger.unstarted_at_crash.items():
        record = sim.journal.operations[op]
        if record.state.terminal:  # how a turn its runner died before starting ended
            coverage[f"unstarted_at_crash:{kind}:{record.execution.value}"] += 1


def operation_of(violation: str | None) -> str | None:
    if not violation or "] " not in violation:
        return None
    return violation.split("] ", 1)[1].split(":", 1)[0]


def history(sim: Simulator, op: str | None) -> list[str]:
    """The operation's events, attempts, executions and runner rows (all, if op unknown)."""
    journal = sim.journal
    ops = [op] if op in journal.operations else sorted(journal.operations)
    lines: list[str] = []
    for name in ops:
        policy, max_attempts = sim.checker.policies[name]
        record = journal.operations[name]
        lines.append(
            f"{name} {policy.value} max_attempts={max_attempts}: now {record.state} "
            f"{record.execution} {record.error_reason or ''} token {record.fencing_token}"
        )
        lines += [
            f"  event {e.sequence}: {e.from_state} -> {e.to_state} ({e.execution}) "
            f"{e.reason} {e.detail}"
            for e in journal.events[name]
        ]
        lines += [
            f"  attempt {a.number}: {a.runner}/{a.incarnation_id} store {a.store_id} "
            f"{a.outcome} {a.detail}"
            for a in journal.attempt_rows(name)
        ]
        lines += [
            f"  execution #{e.index}: {e.runner}/{e.incarnation_id} attempt {e.attempt} "
            f"at {e.started_at:.2f}: {e.outcome}"
            for e in sim.ledger.starts(name)
        ]
        for runner in sim.runners.values():
            row = runner.store.rows.get(name)
            if row is not None:
                lines.append(f"  {runner.name} ({runner.incarnation_id}) row: {describe(row)}")
    return lines
