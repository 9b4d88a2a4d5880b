"""How `turnwire admin` shows what AdminService answers: aligned text for people, JSON for scripts.

Pure functions from SDK values to strings and dicts (``turnwire.cli.render``
does the same for TurnService); ``turnwire.cli.admin`` prints them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from turnwire.cli import render
from turnwire.cli.render import UNSET, clock_time, table
from turnwire.client import (
    AdminOperation,
    Attempt,
    Execution,
    OperationEvidence,
    OperatorVerdict,
    Requeued,
    Runner,
    RunnerChanged,
    RunnerRemoved,
    VerdictRecorded,
)

_INDENT = "    "


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def _indented(text: str, prefix: str = _INDENT) -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def _verdict_word(verdict: OperatorVerdict | None) -> str:
    return UNSET if verdict is None else verdict.verdict.value


# --- operations ------------------------------------------------------------


def operations_table(operations: Sequence[AdminOperation]) -> str:
    headers = (
        "OPERATION",
        "PRINCIPAL",
        "STATE",
        "EXECUTION",
        "ATTEMPTS",
        "RUNNER",
        "POOL",
        "VERDICT",
        "UPDATED",
    )
    rows = [
        (
            item.operation_id,
            item.principal,
            item.operation.state.value,
            item.operation.execution.value,
            str(item.operation.attempt_count),
            item.operation.runner or UNSET,
            item.operation.pool or UNSET,
            _verdict_word(item.operation.verdict),
            clock_time(item.operation.updated_at or item.operation.created_at),
        )
        for item in operations
    ]
    return table(headers, rows)


def admin_operation_json(item: AdminOperation) -> dict[str, Any]:
    """``turnwire get --json``'s shape plus ``principal``."""
    return {**render.operation_json(item.operation), "principal": item.principal}


def admin_operation_detail(item: AdminOperation) -> str:
    rows = render.operation_fields(item.operation)
    rows.insert(1, ("principal", item.principal))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


# --- evidence --------------------------------------------------------------


def _attempts_table(attempts: Sequence[Attempt]) -> str:
    headers = ("#", "RUNNER", "INCARNATION", "STORE", "SENT", "OUTCOME", "DETAIL")
    rows = [
        (
            str(attempt.number),
            attempt.runner or UNSET,
            attempt.incarnation_id or UNSET,
            attempt.store_id or UNSET,
            clock_time(attempt.sent_at),
            attempt.outcome.value,
            attempt.detail or UNSET,
        )
        for attempt in attempts
    ]
    return table(headers, rows)


def evidence_text(evidence: OperationEvidence, arrow: str = "→", *, headline: bool = True) -> str:
    """One operation's case file: who, where it stands, every attempt and event, the verdict.

    Without ``headline`` only the attempts and events (under a detail view that
    already shows the rest).
    """
    item = evidence.operation
    operation = item.operation
    if not headline:
        return "\n".join(_evidence_lines(evidence, arrow))
    head = [
        operation.operation_id,
        f"principal {item.principal}",
        operation.state.value,
        f"execution {operation.execution.value}",
    ]
    if operation.pool:
        head.append(f"pool {operation.pool}")
    if operation.finished_at is not None:
        head.append(f"finished {clock_time(operation.finished_at)}")
    lines = ["  ".join(head)]
    if evidence.verdicts:
        for verdict in evidence.verdicts:
            lines.append(f"  verdict   {render.verdict_note(verdict)}")
    elif operation.state.is_terminal and operation.execution is Execution.UNKNOWN:
        lines.append(
            f"  verdict   none yet; decide: turnwire admin verdict {operation.operation_id} "
            "executed|not-executed --reason TEXT"
        )
    if operation.requeued_as:
        lines.append(f"  requeued  as {operation.requeued_as}")
    if operation.requeued_from:
        lines.append(f"  requeued  from {operation.requeued_from}")
    lines.extend(_evidence_lines(evidence, arrow))
    return "\n".join(lines)


def _evidence_lines(evidence: OperationEvidence, arrow: str) -> list[str]:
    lines = ["  attempts"]
    lines.append(
        _indented(_attempts_table(evidence.attempts)) if evidence.attempts else _INDENT + "none"
    )
    lines.append("  events")
    lines.extend(_INDENT + render.event_line(event, arrow) for event in evidence.events)
    if not evidence.events:
        lines.append(_INDENT + "none")
    return lines


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    return {
        "number": attempt.number,
        "runner": attempt.runner,
        "incarnation_id": attempt.incarnation_id,
        "store_id": attempt.store_id,
        "sent_at": _iso(attempt.sent_at),
        "outcome": attempt.outcome.value,
        "detail": attempt.detail,
    }


def evidence_json(evidence: OperationEvidence) -> dict[str, Any]:
    return {
        "operation": admin_operation_json(evidence.operation),
        "attempts": [attempt_json(attempt) for attempt in evidence.attempts],
        "events": [render.event_json(event) for event in evidence.events],
        "verdicts": [render.verdict_json(verdict) for verdict in evidence.verdicts],
    }


# --- acts ------------------------------------------------------------------


def verdict_headline(recorded: VerdictRecorded) -> str:
    operation = recorded.operation.operation
    verdict = operation.verdict
    word = _verdict_word(verdict)
    if recorded.replayed:
        return (
            f"already recorded: {operation.operation_id} has verdict {word}; "
            "the first record stands"
        )
    return f"recorded verdict {word} on {operation.operation_id}"


def verdict_json(recorded: VerdictRecorded) -> dict[str, Any]:
    return {"replayed": recorded.replayed, "operation": admin_operation_json(recorded.operation)}


def requeue_headline(result: Requeued) -> str:
    new_id, original_id = result.operation.operation_id, result.original.operation_id
    if result.replayed:
        return f"already requeued: {original_id} was requeued as {new_id}; nothing new was made"
    return f"requeued {original_id} as {new_id}"


def requeue_json(result: Requeued) -> dict[str, Any]:
    return {
        "replayed": result.replayed,
        "operation": admin_operation_json(result.operation),
        "original": admin_operation_json(result.original),
    }


def drain_headline(change: RunnerChanged, *, drained: bool) -> str:
    name = change.runner.name
    if drained:
        if change.replayed:
            return f"{name} was already drained; the first reason stands"
        return f"drained {name}: it gets no new turns; turns bound to it finish there"
    if change.replayed:
        return f"{name} was not drained; nothing changed"
    return f"undrained {name}: it takes new turns again"


def runner_change_json(change: RunnerChanged) -> dict[str, Any]:
    return {"replayed": change.replayed, "runner": runner_json(change.runner)}


def added_headline(change: RunnerChanged) -> str:
    runner = change.runner
    if change.replayed:
        return (
            f"{runner.name} is already a member with these fields (generation "
            f"{runner.generation}); nothing changed"
        )
    return (
        f"added {runner.name} (generation {runner.generation}) at {runner.address}, pool "
        f"{','.join(runner.pools)}: every coordinator routes turns to it within seconds"
    )


def removed_headline(result: RunnerRemoved) -> str:
    removal = result.removal
    name, generation = removal.runner, removal.sequence - 1
    if result.replayed:
        return f"{name} (generation {generation}) was already removed; nothing changed"
    forced = ""
    if removal.forced:
        forced = (
            f" by force; {removal.bound_turns} turn(s) bound to it end TIMED_OUT RUNNER_REMOVED"
            if removal.bound_turns
            else " by force"
        )
    return f"removed {name} (generation {generation}){forced}: no coordinator calls it any more"


def removed_json(result: RunnerRemoved) -> dict[str, Any]:
    removal = result.removal
    return {
        "replayed": result.replayed,
        "removal": {
            "runner": removal.runner,
            "sequence": removal.sequence,
            "action": removal.action.value,
            "address": removal.address,
            "pool": removal.pool,
            "kinds": [kind.value for kind in removal.kinds],
            "recorded_by": removal.recorded_by,
            "reason": removal.reason,
            "recorded_at": _iso(removal.recorded_at),
            "forced": removal.forced,
            "bound_turns": removal.bound_turns,
        },
    }


# --- runners ---------------------------------------------------------------


def _drained(runner: Runner) -> str:
    if not runner.drained:
        return "no"
    who = f" by {runner.drained_by}" if runner.drained_by else ""
    why = f": {runner.drain_reason}" if runner.drain_reason else ""
    return f"yes{who}{why}"


def runners_table(runners: Sequence[Runner]) -> str:
    headers = (
        "NAME",
        "GEN",
        "ADDRESS",
        "POOLS",
        "KINDS",
        "EXECUTORS",
        "ADDED BY",
        "INCARNATION",
        "STORE",
        "SLOTS W/R",
        "IN USE W/R",
        "BOUND",
        "DRAINED",
        "HEALTH",
    )
    rows = [
        (
            runner.name,
            str(runner.generation),
            runner.address,
            ",".join(runner.pools) or UNSET,
            "+".join(kind.value.lower() for kind in runner.kinds) or UNSET,
            ",".join(runner.executors) or UNSET,
            runner.added_by or UNSET,
            runner.incarnation_id or UNSET,
            runner.store_id or UNSET,
            f"{runner.writable_slots}/{runner.read_only_slots}",
            f"{runner.writable_in_use}/{runner.read_only_in_use}",
            str(runner.bound_turns),
            _drained(runner),
            runner.health or ("answering" if runner.answering else "not answering"),
        )
        for runner in runners
    ]
    return table(headers, rows)


def runner_json(runner: Runner) -> dict[str, Any]:
    return {
        "name": runner.name,
        "address": runner.address,
        "pools": list(runner.pools),
        "incarnation_id": runner.incarnation_id,
        "store_id": runner.store_id,
        "writable_slots": runner.writable_slots,
        "read_only_slots": runner.read_only_slots,
        "writable_in_use": runner.writable_in_use,
        "read_only_in_use": runner.read_only_in_use,
        "answering": runner.answering,
        "health": runner.health,
        "drained": runner.drained,
        "drained_by": runner.drained_by,
        "drain_reason": runner.drain_reason,
        "drained_at": _iso(runner.drained_at),
        "kinds": [kind.value for kind in runner.kinds],
        "generation": runner.generation,
        "added_by": runner.added_by,
        "added_reason": runner.added_reason,
        "added_at": _iso(runner.added_at),
        "bound_turns": runner.bound_turns,
        "executors": list(runner.executors),
    }
