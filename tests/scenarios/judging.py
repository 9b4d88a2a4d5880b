"""Judging one scenario: its cell's legal outcome, then the invariant oracle."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tests.scenarios.cells import Cell, Need
from tests.scenarios.drivers import DRIVERS
from tests.scenarios.stage import TARGET, Stage
from turnwire.client import Operation
from turnwire.harness import Verdict, check_run
from turnwire.harness import oracle_schema as names
from turnwire.harness.oracle_invariants import is_replay
from turnwire.ledger import count_starts


@dataclass(frozen=True)
class Played:
    operation: Operation
    starts: int
    verdict: Verdict


def play(stage: Stage, cell: Cell) -> Played:
    """Drive the cell's scenario on the stage; leave every process running."""
    assert cell.injection is not None
    injection = cell.injection
    driver = DRIVERS[injection.driver]
    key = stage.new_key(cell.name)
    stage.fired.clear()

    async def scenario(s: Stage) -> Operation:
        try:
            op_id = await driver(s, injection, key)
            return await s.get(op_id)
        finally:
            await s.clear_rules()

    try:
        operation = asyncio.run(stage.play(scenario))
    finally:
        stage.heal()
    starts = count_starts(stage.deployment.ledger)[operation.operation_id]
    deployment = stage.deployment
    verdict = check_run(
        deployment.journal, [slot.store for slot in deployment.runners], deployment.ledger
    )
    return Played(operation, starts, verdict)


def reconciles(verdict: Verdict, op_id: str) -> int:
    """Transitions out of DISPATCH_UNKNOWN other than a resend or giving up ambiguous."""
    history = verdict.history(op_id)
    assert history is not None
    return sum(
        1
        for e in history.events
        if e.from_state == names.DISPATCH_UNKNOWN
        and e.to_state != names.DISPATCHING
        and not (e.to_state == names.TIMED_OUT and e.execution == names.UNKNOWN)
    )


def replays(verdict: Verdict, op_id: str) -> int:
    history = verdict.history(op_id)
    assert history is not None
    return sum(is_replay(history, attempt) for attempt in history.attempts)


def _need(need: Need, count: int, what: str) -> str | None:
    if need is Need.REQUIRED and count == 0:
        return f"a {what} was required, none happened"
    if need is Need.FORBIDDEN and count:
        return f"no {what} was allowed, {count} happened"
    return None


def outcome_problems(cell: Cell, played: Played) -> list[str]:
    """Everything about the operation's end that its cell does not allow."""
    legal = cell.legal
    assert legal is not None
    op, op_id = played.operation, played.operation.operation_id
    problems = []
    if op.attempt_count and op.runner != TARGET:
        problems.append(f"bound to {op.runner!r}, not {TARGET}: the fault never applied")
    if op.state not in legal.states:
        problems.append(f"state {op.state} not in {sorted(legal.states)}")
    if op.execution not in legal.executions:
        problems.append(f"execution {op.execution} not in {sorted(legal.executions)}")
    low, high = legal.attempts
    if not low <= op.attempt_count <= high:
        problems.append(f"attempt_count {op.attempt_count} not in {low}..{high}")
    if not legal.min_starts <= played.starts <= legal.max_starts:
        problems.append(
            f"{played.starts} executor starts; allowed {legal.min_starts}..{legal.max_starts}"
        )
    reason = op.error.reason if op.error else ""
    if legal.reasons is not None and reason not in legal.reasons:
        problems.append(f"error reason {reason!r} not in {sorted(legal.reasons)}")
    for need, count, what in (
        (legal.replay, replays(played.verdict, op_id), "replay"),
        (legal.reconciled, reconciles(played.verdict, op_id), "reconcile without resend"),
    ):
        problem = _need(need, count, what)
        if problem:
            problems.append(problem)
    return problems


def unfired(stage: Stage) -> list[str]:
    """Installed rules that never fired: the scenario did not test its cell."""
    return [status.rule.to_text() for status in stage.fired if status.hits == 0]


def oracle_problems(played: Played) -> list[str]:
    """Oracle violations about this operation, or about no operation in particular."""
    op_id = played.operation.operation_id
    return [
        f"invariant {v.invariant} ({v.operation_id}): {v.message}"
        for v in played.verdict.violations
        if v.operation_id in (op_id, "")
    ]


def check_cell(stage: Stage, cell: Cell) -> None:
    """Play the cell; fail with every way its outcome or the oracle disagrees."""
    played = play(stage, cell)
    assert cell.legal is not None and cell.injection is not None
    problems = outcome_problems(cell, played)
    problems += [f"rule never fired: {text}" for text in unfired(stage)]
    problems += oracle_problems(played)
    assert not problems, (
        f"{cell.name} ({cell.injection.how}); legal: {cell.legal.describe()}; "
        f"got {played.operation}:\n  " + "\n  ".join(problems)
    )
