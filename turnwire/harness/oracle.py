"""The invariant oracle: after a run, prove PROTOCOL.md §8 items 1-6 held, or show why not.

It joins what the run left behind (the coordinator journal, every runner
store, the metered ledger) and judges it with the pure checks in
``oracle_invariants``. A run that never exercised a replay, a reconcile
without resend or an ambiguity proves nothing about the hard parts of the
protocol, so it gets its own status instead of a pass (the anti-vacuity
floor).

    verdict = check_run("sqlite:///journal.db", [Path("runner.db")], Path("ledger.jsonl"))
    print(render(verdict))
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from turnwire.harness import oracle_invariants as inv
from turnwire.harness import oracle_schema as names
from turnwire.harness.oracle_history import OperationHistory, RunRecord
from turnwire.harness.oracle_invariants import Violation
from turnwire.harness.oracle_load import load_run

# Clocks of the coordinator and the runners may disagree a little even on one
# machine (two processes reading the wall clock); the order check tolerates this.
DEFAULT_CLOCK_SKEW = 0.25


class Status(enum.StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"  # at least one violation
    VACUOUS = "PROVES_NOTHING"  # no violation, but nothing hard was exercised


@dataclass(frozen=True)
class Figures:
    """What the run did; ``executions`` are ledger lines."""

    operations: int
    by_terminal_state: Mapping[str, int]
    non_terminal: int
    executions: int
    # Executor starts beyond the first, summed over operations (SAFE included).
    duplicates: int
    lost: int
    # Attempts sent after an attempt that was not definitely refused.
    replays: int
    # Transitions out of DISPATCH_UNKNOWN to RUNNING, CANCELLING or a terminal
    # state, other than giving up ambiguous (TIMED_OUT with execution UNKNOWN).
    reconciled_without_resend: int
    # Operations that ended TIMED_OUT with execution UNKNOWN.
    ambiguous: int

    @property
    def exercised(self) -> bool:
        return bool(self.replays or self.reconciled_without_resend or self.ambiguous)


@dataclass(frozen=True)
class Verdict:
    status: Status
    violations: tuple[Violation, ...]
    figures: Figures
    run: RunRecord = field(repr=False)
    healed: bool = True

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    def history(self, operation_id: str) -> OperationHistory | None:
        return self.run.histories.get(operation_id)


def check_run(
    journal_url: str,
    runner_stores: Sequence[Path],
    ledger: Path,
    *,
    healed: bool = True,
    clock_skew: float = DEFAULT_CLOCK_SKEW,
) -> Verdict:
    """Read a finished run and judge it. Raises OracleInputError if unreadable."""
    run = load_run(journal_url, runner_stores, ledger)
    return check(run, healed=healed, clock_skew=clock_skew)


def check(
    run: RunRecord, *, healed: bool = True, clock_skew: float = DEFAULT_CLOCK_SKEW
) -> Verdict:
    """Judge a run: every violation of invariants 1-6, the figures, the status.

    ``healed=False``: the network never healed, so an operation may stay
    non-terminal as long as it is visible with a reason (invariant 2).
    """
    violations: list[Violation] = []
    for history in run.histories.values():
        violations += inv.at_most_one_start(history)
        violations += inv.nothing_lost(history, healed=healed)
        violations += inv.true_outcome(history)
        violations += inv.proof_before_replay(history)
        violations += inv.attempt_before_runner(history, clock_skew=clock_skew)
        violations += inv.legal_event_log(history)
    violations += inv.orphans(run)
    figures = figures_of(run, healed=healed)
    if violations:
        status = Status.FAIL
    elif figures.exercised:
        status = Status.PASS
    else:
        status = Status.VACUOUS
    ordered = sorted(violations, key=lambda v: (v.operation_id, v.invariant))
    return Verdict(status, tuple(ordered), figures, run, healed)


def figures_of(run: RunRecord, *, healed: bool = True) -> Figures:
    histories = list(run.histories.values())
    terminal = Counter(
        h.operation.state for h in histories if h.operation.state in names.TERMINAL_STATES
    )
    return Figures(
        operations=len(histories),
        by_terminal_state=dict(sorted(terminal.items())),
        non_terminal=len(histories) - sum(terminal.values()),
        executions=run.ledger_lines,
        duplicates=sum(max(len(inv.first_executions(h)) - 1, 0) for h in histories),
        lost=sum(inv.is_lost(h, healed=healed) for h in histories),
        replays=sum(inv.is_replay(h, a) for h in histories for a in h.attempts),
        reconciled_without_resend=sum(_reconciles(h) for h in histories),
        ambiguous=sum(
            h.operation.state == names.TIMED_OUT and h.operation.execution == names.UNKNOWN
            for h in histories
        ),
    )


def _reconciles(history: OperationHistory) -> int:
    count = 0
    for event in history.events:
        if event.from_state != names.DISPATCH_UNKNOWN or event.to_state == names.DISPATCHING:
            continue
        if event.to_state == names.TIMED_OUT and event.execution == names.UNKNOWN:
            continue  # gave up: that is an ambiguity, not a reconcile
        count += 1
    return count
