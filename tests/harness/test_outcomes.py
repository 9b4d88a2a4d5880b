"""The demo's explanation rows: every turn that did not succeed is named, with its rule."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from turnwire.harness.oracle_history import JournalOperation, OperationHistory
from turnwire.harness.outcomes import explain, render_explanation
from turnwire.ledger import LedgerEntry


def _history(op_id: str, state: str, execution: str, reason: str | None, started: bool):
    operation = JournalOperation(
        operation_id=op_id,
        state=state,
        execution=execution,
        replay_policy="PROBE_FIRST",
        max_attempts=5,
        attempt_count=1,
        runner="runner-2",
        incarnation_id="a" * 32,
        store_id="s",
        result=None,
        error_reason=reason,
        error_message=None,
        last_event_sequence=3,
    )
    ledger = (
        (
            LedgerEntry(
                operation_id=op_id,
                incarnation_id="a" * 32,
                attempt=1,
                pid=1,
                started_at=datetime(2026, 12, 3, tzinfo=UTC).isoformat(),
            ),
        )
        if started
        else ()
    )
    return OperationHistory(operation, (), (), (), ledger)


@pytest.mark.rule("C8")
def test_each_way_a_turn_did_not_succeed_is_one_row_with_its_rule_and_ledger_count():
    """Groups by state, reason and execution; UNKNOWN rows carry the ledger's truth (C8, §6.1)."""
    histories = [
        _history("op-ok", "SUCCEEDED", "STARTED", None, True),
        *(_history(f"op-i{n}", "TIMED_OUT", "STARTED", "INTERRUPTED", True) for n in range(3)),
        _history("op-u1", "TIMED_OUT", "UNKNOWN", "ERROR_REASON_INCARNATION_CHANGED", True),
        _history("op-u2", "TIMED_OUT", "UNKNOWN", "INCARNATION_CHANGED", False),
    ]
    groups = explain(histories)
    assert [(g.state, g.reason, g.execution, g.count, g.started_in_ledger) for g in groups] == [
        ("TIMED_OUT", "INTERRUPTED", "STARTED", 3, 3),
        ("TIMED_OUT", "INCARNATION_CHANGED", "UNKNOWN", 2, 1),
    ]
    text = render_explanation(groups)
    assert text.startswith("why 5 turn(s) did not succeed")
    assert (
        "  3 TIMED_OUT INTERRUPTED, execution STARTED (the ledger shows 3 of 3 started)\n" in text
    )
    flat = " ".join(text.split())
    assert "the runner process died while the executor ran" in flat
    assert "R10" in flat and "§6.1" in flat and "C8" in flat
    assert "UNKNOWN (the ledger shows 1 of 2 started)" in flat
    assert flat.endswith("an operator can record a verdict: turnwire admin ambiguous")


def test_a_run_where_every_turn_succeeded_explains_nothing():
    """No rows, no heading: there is nothing to account for."""
    assert render_explanation(explain([_history("op", "SUCCEEDED", "STARTED", None, True)])) == ""


def test_a_reason_without_its_own_sentence_still_gets_a_row_that_says_where_to_look():
    """An outcome this module has no words for is shown, never dropped."""
    (group,) = explain([_history("op", "PROTOCOL_ERROR", "UNKNOWN", "SOMETHING_NEW", False)])
    assert "turnwire get OP --json" in group.render()
