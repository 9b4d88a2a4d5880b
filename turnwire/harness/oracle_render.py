"""A verdict for people (``render``) and for machines (``verdict_json``).

Each violation is shown with its operation's full history, events,
attempts, runner rows and ledger lines, so the reader can judge it without
opening the databases.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from turnwire.harness.oracle import Status, Verdict
from turnwire.harness.oracle_history import OperationHistory, RunnerRow
from turnwire.harness.oracle_invariants import Violation

_HEADLINES = {
    Status.PASS: "PASS: invariants 1-6 hold",
    Status.FAIL: "FAIL: {n} violation(s)",
    Status.VACUOUS: (
        "PROVES NOTHING: no violation, but the run exercised no replay, no reconcile "
        "without resend and no ambiguity"
    ),
}


def headline(verdict: Verdict) -> str:
    return _HEADLINES[verdict.status].format(n=len(verdict.violations))


def render(verdict: Verdict) -> str:
    lines = [headline(verdict), ""]
    for operation_id, violations in _by_operation(verdict.violations):
        lines.append(f"operation {operation_id}")
        lines += [f"  VIOLATION invariant {v.invariant}: {v.message}" for v in violations]
        history = verdict.history(operation_id)
        lines += history_lines(history) if history else _orphan_lines(verdict, operation_id)
        lines.append("")
    lines += figure_lines(verdict)
    return "\n".join(lines) + "\n"


def _by_operation(violations: Iterable[Violation]) -> list[tuple[str, list[Violation]]]:
    grouped: dict[str, list[Violation]] = {}
    for violation in violations:
        grouped.setdefault(violation.operation_id, []).append(violation)
    return list(grouped.items())


def _when(value: datetime | float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        value = datetime.fromtimestamp(value, UTC)
    return value.isoformat(timespec="microseconds")


def history_lines(history: OperationHistory) -> list[str]:
    op = history.operation
    lines = [
        f"  now: {op.state} execution={op.execution} policy={op.replay_policy} "
        f"attempts={op.attempt_count}/{op.max_attempts} bound={op.runner}/{op.incarnation_id} "
        f"store={op.store_id} error={op.error_reason or '-'}",
        "  events:",
    ]
    lines += [
        f"    #{e.sequence} {e.from_state or '-'} -> {e.to_state} [{e.execution}] "
        f"{_when(e.at)} reason={e.reason or '-'} {e.detail}"
        for e in history.events
    ] or ["    (none)"]
    lines.append("  attempts:")
    lines += [
        f"    {a.number}: {a.runner}/{a.incarnation_id} store={a.store_id} "
        f"sent={_when(a.sent_at)} {a.outcome} {a.detail}"
        for a in history.attempts
    ] or ["    (none)"]
    lines.append("  runner rows:")
    lines += [_row_line(row) for row in history.runner_rows] or ["    (none)"]
    lines.append("  ledger:")
    lines += [
        f"    attempt {e.attempt} on {e.incarnation_id} pid={e.pid} started={e.started_at}"
        for e in history.ledger
    ] or ["    (none)"]
    return lines


def _orphan_lines(verdict: Verdict, operation_id: str) -> list[str]:
    """What the runners and the ledger hold about an operation the journal never accepted."""
    rows = [r for r in verdict.run.orphan_rows if r.operation_id == operation_id]
    starts = [e for e in verdict.run.orphan_ledger if e.operation_id == operation_id]
    return [
        "  (unknown to the journal)",
        "  runner rows:",
        *([_row_line(row) for row in rows] or ["    (none)"]),
        "  ledger:",
        *(
            [
                f"    attempt {e.attempt} on {e.incarnation_id} started={e.started_at}"
                for e in starts
            ]
            or ["    (none)"]
        ),
    ]


def _row_line(row: RunnerRow) -> str:
    result = "-" if row.result is None else f"{len(row.result.output)} bytes"
    return (
        f"    {row.store_path} (store {row.store_id}): {row.state} [{row.execution}] "
        f"attempt {row.attempt} on {row.incarnation_id} accepted={_when(row.accepted_at)} "
        f"started={_when(row.started_at)} settled={_when(row.settled_at)} result={result}"
        f"{' released' if row.released else ''}"
    )


def figure_lines(verdict: Verdict) -> list[str]:
    figures = verdict.figures
    rows: list[tuple[str, object]] = [
        ("operations", figures.operations),
        *((f"  {state}", count) for state, count in figures.by_terminal_state.items()),
        ("  not terminal", figures.non_terminal),
        ("executions (ledger lines)", figures.executions),
        ("duplicates", figures.duplicates),
        ("lost" if verdict.healed else "lost (not healed: no visible reason)", figures.lost),
        ("replays", figures.replays),
        ("reconciled without resend", figures.reconciled_without_resend),
        ("ambiguous (TIMED_OUT, execution UNKNOWN)", figures.ambiguous),
    ]
    width = max(len(name) for name, _ in rows)
    return ["figures:", *(f"  {name:<{width}}  {value}" for name, value in rows)]


# --- JSON ----------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Dataclasses, bytes and datetimes as JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    """The verdict as one JSON object; histories only for violating operations."""
    figures = _plain(verdict.figures)
    violating = dict.fromkeys(v.operation_id for v in verdict.violations)
    return {
        "status": verdict.status.value,
        "headline": headline(verdict),
        "healed": verdict.healed,
        "figures": figures,
        "violations": [_plain(v) for v in verdict.violations],
        "histories": {
            oid: _plain(history)
            for oid in violating
            if (history := verdict.history(oid)) is not None
        },
    }
