"""Builders for pure-core tests: records, runner rows, answers, and a tiny
in-memory "journal" that applies a Decision through the real journal rules
(``storage.rules.prepare_change``), so every Change a rule emits is one the
journal would accept."""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

from coordinator_svc.core.decide import decide
from coordinator_svc.core.decision import Context, Decision
from coordinator_svc.core.events import Event, PreflightAnswer
from coordinator_svc.core.model import (
    AttemptOutcome,
    AttemptRecord,
    Execution,
    OperationRecord,
    OpState,
    ReplayPolicy,
    TurnKind,
)
from coordinator_svc.core.runner_view import RunnerOp, RunnerOpState
from coordinator_svc.core.witness import StoreOpen
from coordinator_svc.storage import rules
from turnwire.ids import dispatch_stamp

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
INC_A = "a" * 32
INC_B = "b" * 32
STORE = "st_" + "1" * 32
OTHER_STORE = "st_" + "2" * 32
RUNNER = "r1"
# A Dispatch decided at NOW carries this witness stamp (§6).
STAMP = dispatch_stamp(NOW)
# A chain of openings in which INC_B opened the store after INC_A had sealed
# it: the store vouches for every attempt INC_A received (§6 witness).
VOUCHING = (StoreOpen(INC_B, INC_A, 2**63 - 1),)
ENVELOPE = b"envelope bytes"
DIGEST = hashlib.sha256(ENVELOPE).hexdigest()


def queued(**fields: Any) -> OperationRecord:
    values: dict[str, Any] = {
        "operation_id": "op_1",
        "principal": "alice",
        "idempotency_key_digest": "k",
        "request_digest": "r",
        "envelope": ENVELOPE,
        "envelope_digest": DIGEST,
        "pool": "default",
        "kind": TurnKind.WRITABLE,
        "replay_policy": ReplayPolicy.PROBE_FIRST,
        "max_attempts": 5,
        "state": OpState.QUEUED,
        "execution": Execution.NOT_STARTED,
        "created_at": NOW - timedelta(seconds=10),
        "updated_at": NOW - timedelta(seconds=10),
        "last_event_sequence": 1,
    }
    values.update(fields)
    return OperationRecord(**values)


def attempt(
    number: int,
    outcome: AttemptOutcome = AttemptOutcome.UNKNOWN,
    incarnation: str = INC_A,
    store: str | None = STORE,
) -> AttemptRecord:
    return AttemptRecord(
        "op_1", number, RUNNER, incarnation, store, NOW - timedelta(seconds=5), outcome
    )


def bound(state: OpState, attempts: int = 1, **fields: Any) -> OperationRecord:
    """An operation bound to RUNNER/INC_A after ``attempts`` attempts."""
    values: dict[str, Any] = {
        "state": state,
        "attempt_count": attempts,
        "last_attempt_at": NOW - timedelta(seconds=5),
        "runner": RUNNER,
        "incarnation_id": INC_A,
        "store_id": STORE,
        "execution": Execution.UNKNOWN,
        "acknowledged": state in (OpState.RUNNING, OpState.CANCELLING),
        "last_event_sequence": 1 + attempts,
    }
    if state is OpState.DISPATCH_UNKNOWN:
        values["unknown_since"] = NOW - timedelta(seconds=5)
    values.update(fields)
    return queued(**values)


def ctx(*attempts: AttemptRecord, now: datetime = NOW, **fields: Any) -> Context:
    return Context(now=now, attempts=tuple(attempts), replica_id="replica-1", **fields)


def row(
    state: RunnerOpState,
    execution: Execution | None = None,
    incarnation: str = INC_A,
    **fields: Any,
) -> RunnerOp:
    return RunnerOp(
        state=state,
        execution=execution,
        incarnation_id=incarnation,
        envelope_digest=DIGEST,
        **fields,
    )


def answer(
    op: RunnerOp | None = None,
    *,
    incarnation: str = INC_A,
    store: str = STORE,
    durable: bool = False,
    asked: int = 1,
    runner: str = RUNNER,
    opens: tuple[StoreOpen, ...] | None = None,
) -> PreflightAnswer:
    """A status answer; a durable one vouches for INC_A unless ``opens`` says otherwise."""
    chain = (VOUCHING if durable else ()) if opens is None else opens
    return PreflightAnswer(
        runner, incarnation, store, durable, op is not None, op, asked, store_opens=chain
    )


def commit(record: OperationRecord, decision: Decision) -> OperationRecord:
    """Apply the decision's change through the journal's own rules."""
    if decision.change is None:
        return record
    assert decision.change.before == record
    stored, _event, _attempt = rules.prepare_change(decision.change)
    return stored


def step(
    record: OperationRecord, event: Event, context: Context
) -> tuple[OperationRecord, Decision]:
    decision = decide(record, event, context)
    return commit(record, decision), decision


def attempts_after(
    existing: tuple[AttemptRecord, ...], decision: Decision
) -> tuple[AttemptRecord, ...]:
    """The attempt rows once the decision is committed."""
    rows = {a.number: a for a in existing}
    change = decision.change
    if change is None:
        return existing
    if change.new_attempt is not None:
        rows[change.new_attempt.number] = change.new_attempt
    for update in change.attempt_updates:
        rows[update.number] = dataclasses.replace(rows[update.number], outcome=update.outcome)
    return tuple(rows[n] for n in sorted(rows))
