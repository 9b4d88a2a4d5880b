"""One test pair per §8 invariant: a clean history passes, a crafted violation is caught.

Clean histories are written through the real coordinator rules and journal
and the real runner store; violations are crafted with raw SQL (or ledger
lines) because the code would refuse to write them: that is the point.
"""

from __future__ import annotations

import pytest

from coordinator_svc.core.model import Execution, ReplayPolicy, StopReason
from coordinator_svc.core.runner_view import RunnerOp, RunnerOpState
from tests.harness.run_builder import RunBuilder, invariants, result_bytes
from turnwire.harness import Status


def _clean_mix(run: RunBuilder) -> None:
    inc = run.start_runner()
    run.happy("op-happy", inc)
    run.lost_reply("op-lost", inc)
    run.replayed("op-replay", inc)
    run.ambiguous("op-ambiguous", inc)


def test_clean_run_passes_every_invariant(run: RunBuilder) -> None:
    """§8 1-6: a run with a replay, a reconcile and an ambiguity, all by the rules, passes."""
    _clean_mix(run)
    verdict = run.verdict()
    assert verdict.violations == ()
    assert verdict.status is Status.PASS
    assert verdict.figures.replays == 1
    assert verdict.figures.reconciled_without_resend == 1
    assert verdict.figures.ambiguous == 1
    assert verdict.figures.executions == 3


# --- 1 -------------------------------------------------------------------------


def test_second_start_of_one_operation_is_invariant_1(run: RunBuilder) -> None:
    """§8.1: two executor starts of one PROBE_FIRST operation are caught."""
    inc = run.start_runner()
    run.happy("op-1", inc)
    run.ledger_line("op-1", inc.incarnation_id, 1)  # the same attempt started again
    verdict = run.verdict()
    assert 1 in invariants(verdict)
    assert invariants(verdict) <= {1, 3}  # 3: SUCCEEDED with two executions
    assert verdict.figures.duplicates == 1


@pytest.mark.rule("R15")
def test_a_retry_inside_the_row_is_not_a_second_start(run: RunBuilder) -> None:
    """§8.1, R15: the ledger line of execution 2 of the same attempt on the same
    incarnation (a retry after a failure declared NONE) is not a duplicate."""
    inc = run.start_runner()
    run.happy("op-1", inc)
    run.ledger_line("op-1", inc.incarnation_id, 1, execution=2)
    verdict = run.verdict()
    assert 1 not in invariants(verdict) and verdict.figures.duplicates == 0


def test_safe_operation_may_run_up_to_max_attempts(run: RunBuilder) -> None:
    """§8.1, §3 SAFE: a SAFE replay to a new incarnation may execute again, within max_attempts."""
    first = run.start_runner()
    run.submit("op-safe", policy=ReplayPolicy.SAFE, max_attempts=3)
    attempt = run.preflight("op-safe", first)
    run.admit("op-safe", first, attempt)
    run.launch("op-safe", first, attempt)
    run.lose_reply("op-safe")
    second = run.start_runner("runner-a-restored.db")  # a new store: no §6 proof
    attempt = run.preflight("op-safe", second)
    assert attempt == 2
    run.admit("op-safe", second, attempt)
    run.acknowledged("op-safe", second)
    run.launch("op-safe", second, attempt)
    run.settle_success("op-safe", second)
    run.succeeded("op-safe", second)
    verdict = run.verdict()
    assert verdict.violations == ()
    assert verdict.figures.executions == 2


def test_safe_operation_beyond_max_attempts_is_invariant_1(run: RunBuilder) -> None:
    """§8.1: even SAFE allows at most max_attempts starts."""
    inc = run.start_runner()
    run.submit("op-safe", policy=ReplayPolicy.SAFE, max_attempts=2)
    attempt = run.preflight("op-safe", inc)
    run.admit("op-safe", inc, attempt)
    run.acknowledged("op-safe", inc)
    run.launch("op-safe", inc, attempt)
    run.ledger_line("op-safe", inc.incarnation_id, attempt)
    run.ledger_line("op-safe", inc.incarnation_id, attempt)
    verdict = run.verdict(healed=False)
    messages = [v.message for v in verdict.violations if v.invariant == 1]
    assert any("3 executor starts" in m for m in messages)
    assert any("attempt 1 started 3 times" in m for m in messages)


# --- 2 -------------------------------------------------------------------------


def _stuck(run: RunBuilder) -> None:
    inc = run.start_runner()
    run.submit("op-stuck")
    run.preflight("op-stuck", inc)
    run.lose_reply("op-stuck")


def test_non_terminal_after_heal_is_invariant_2(run: RunBuilder) -> None:
    """§8.2: an operation still DISPATCH_UNKNOWN after the network healed is lost."""
    _stuck(run)
    verdict = run.verdict()
    assert invariants(verdict) == {2}
    assert verdict.figures.lost == 1


def test_not_healed_operation_visible_with_reason_passes(run: RunBuilder) -> None:
    """§8.2: without heal, a non-terminal operation with a visible reason is not lost."""
    _stuck(run)
    verdict = run.verdict(healed=False)
    assert verdict.violations == ()
    assert verdict.figures.lost == 0


def test_not_healed_operation_without_reason_is_invariant_2(run: RunBuilder) -> None:
    """§8.2: without heal, a non-terminal operation must still say why."""
    inc = run.start_runner()
    run.submit("op-silent")
    run.preflight("op-silent", inc)
    # Append an unexplained DISPATCHING -> DISPATCH_UNKNOWN (the code always explains).
    run.raw_sql(
        "INSERT INTO events VALUES ('op-silent', 3, 'DISPATCHING', 'DISPATCH_UNKNOWN', "
        "'UNKNOWN', '2026-11-29 12:00:01.000000', '', '')"
    )
    run.raw_sql(
        "UPDATE operations SET state = 'DISPATCH_UNKNOWN', last_event_sequence = 3 "
        "WHERE operation_id = 'op-silent'"
    )
    verdict = run.verdict(healed=False)
    assert invariants(verdict) == {2}


# --- 3 -------------------------------------------------------------------------


def test_recorded_result_differs_from_runner_is_invariant_3(run: RunBuilder) -> None:
    """§8.3: SUCCEEDED must record the result the runner's row holds."""
    inc = run.start_runner()
    run.happy("op-1", inc)
    run.raw_sql(
        "UPDATE operations SET result = :result WHERE operation_id = 'op-1'",
        result=result_bytes(b"something else"),
    )
    verdict = run.verdict()
    assert invariants(verdict) == {3}
    assert "differs" in verdict.violations[0].message


def test_started_without_a_ledger_start_is_invariant_3(run: RunBuilder) -> None:
    """§8.3: execution STARTED (and SUCCEEDED) with no executor start in the ledger is false."""
    inc = run.start_runner()
    run.happy("op-1", inc)
    run.ledger.write_bytes(b"")
    verdict = run.verdict()
    assert invariants(verdict) == {3}
    assert any("no start" in v.message for v in verdict.violations)


def test_not_started_with_a_ledger_start_is_invariant_3(run: RunBuilder) -> None:
    """§8.3: execution NOT_STARTED while the ledger shows a start is false."""
    inc = run.start_runner()
    run.ambiguous("op-1", inc)
    run.ledger_line("op-1", inc.incarnation_id, 1)
    run.raw_sql("UPDATE operations SET execution = 'NOT_STARTED' WHERE operation_id = 'op-1'")
    verdict = run.verdict()
    assert invariants(verdict) == {3}


def test_succeeded_while_runner_says_failed_is_invariant_3(run: RunBuilder) -> None:
    """§8.3: SUCCEEDED is a lie when the runner's settled row says FAILED."""
    inc = run.start_runner()
    run.happy("op-1", inc)
    run.raw_store_sql(
        run.store_paths[0],
        "UPDATE runner_operations SET state = 'FAILED', result_output = NULL "
        "WHERE operation_id = 'op-1'",
    )
    verdict = run.verdict()
    assert invariants(verdict) == {3}


# --- 4 -------------------------------------------------------------------------


@pytest.mark.rule("C6")
def test_replay_after_definite_refusals_and_durable_store_proof_pass(run: RunBuilder) -> None:
    """§8.4, C6, §6: after refusals any runner may be tried; same-store absence licenses replay."""
    inc = run.start_runner()
    run.submit("op-refused")
    run.preflight("op-refused", inc)
    run.refuse("op-refused", inc)
    other = run.start_runner("runner-b.db")
    attempt = run.preflight("op-refused", other)
    assert attempt == 2
    run.admit("op-refused", other, attempt)
    run.acknowledged("op-refused", other)
    run.launch("op-refused", other, attempt)
    run.settle_success("op-refused", other)
    run.succeeded("op-refused", other)

    run.submit("op-readmitted")
    run.preflight("op-readmitted", inc)
    run.admit("op-readmitted", inc, 1)
    run.lose_reply("op-readmitted")
    run.drain("op-readmitted", inc)  # a clean stop seals the store: it vouches (§6.1)
    restarted = run.start_runner()  # same store file: a §6 durable store
    old_row = RunnerOp(
        RunnerOpState.ACCEPTED,
        Execution.NOT_STARTED,
        inc.incarnation_id,
        stop_reason=StopReason.SHUTDOWN,
    )
    attempt = run.preflight("op-readmitted", restarted, old_row)
    assert attempt == 2
    run.take_over("op-readmitted", restarted, attempt)
    run.acknowledged("op-readmitted", restarted)
    run.launch("op-readmitted", restarted, attempt)
    run.settle_success("op-readmitted", restarted)
    run.succeeded("op-readmitted", restarted)
    verdict = run.verdict()
    assert verdict.violations == ()
    assert verdict.figures.replays == 1  # only the readmission followed an unrefused attempt


def test_replay_without_absence_proof_is_invariant_4(run: RunBuilder) -> None:
    """§8.4: a second attempt after an unknown one needs a named absence proof."""
    inc = run.start_runner()
    run.submit("op-1")
    run.preflight("op-1", inc)
    run.lose_reply("op-1")
    attempt = run.dispatch("op-1", inc, why="retrying after a timeout")
    run.admit("op-1", inc, attempt)
    run.acknowledged("op-1", inc)
    run.launch("op-1", inc, attempt)
    run.settle_success("op-1", inc)
    run.succeeded("op-1", inc)
    verdict = run.verdict()
    assert invariants(verdict) == {4}
    assert "without an absence proof" in verdict.violations[0].message


@pytest.mark.rule("C8a")
def test_replay_to_another_incarnation_is_invariant_4(run: RunBuilder) -> None:
    """§8.4, C8a: absence on a new incarnation (another store) proves nothing about the old."""
    inc = run.start_runner()
    run.submit("op-1")
    run.preflight("op-1", inc)
    run.admit("op-1", inc, 1)
    run.lose_reply("op-1")
    other = run.start_runner("runner-a-lost-store.db")
    attempt = run.dispatch("op-1", other, why="replay: absent on the bound incarnation")
    run.admit("op-1", other, attempt)
    run.acknowledged("op-1", other)
    run.launch("op-1", other, attempt)
    run.settle_success("op-1", other)
    run.succeeded("op-1", other)
    verdict = run.verdict()
    assert invariants(verdict) == {4}
    assert "proves nothing" in verdict.violations[0].message


# --- 5 -------------------------------------------------------------------------


@pytest.mark.rule("C4")
def test_runner_accepting_before_the_attempt_was_sent_is_invariant_5(run: RunBuilder) -> None:
    """§8.5, C4: a runner row accepted before its attempt row was committed is caught."""
    inc = run.start_runner()
    run.submit("op-1")
    attempt = run.preflight("op-1", inc)
    run.admit("op-1", inc, attempt, at=run.now.timestamp() - 5.0)
    run.acknowledged("op-1", inc)
    run.launch("op-1", inc, attempt)
    run.settle_success("op-1", inc)
    run.succeeded("op-1", inc)
    verdict = run.verdict()
    assert invariants(verdict) == {5}
    assert "before the journal recorded it" in verdict.violations[0].message


def test_runner_row_for_an_unrecorded_attempt_is_invariant_5(run: RunBuilder) -> None:
    """§8.5: a runner row holding an attempt number the journal never wrote is caught."""
    inc = run.start_runner()
    run.happy("op-1", inc)
    run.raw_store_sql(
        run.store_paths[0], "UPDATE runner_operations SET attempt = 7 WHERE operation_id = 'op-1'"
    )
    verdict = run.verdict()
    assert invariants(verdict) == {5}


def test_runner_row_for_an_unknown_operation_is_invariant_5(run: RunBuilder) -> None:
    """§8.5: a runner that admitted an operation the journal never accepted is caught."""
    inc = run.start_runner()
    run.happy("op-1", inc)
    run.admit("op-ghost", inc, 1)
    verdict = run.verdict()
    assert invariants(verdict) == {5}
    assert verdict.violations[0].operation_id == "op-ghost"


# --- 6 -------------------------------------------------------------------------


def _running(run: RunBuilder, op_id: str = "op-1") -> None:
    inc = run.start_runner()
    run.submit(op_id)
    attempt = run.preflight(op_id, inc)
    run.admit(op_id, inc, attempt)
    run.acknowledged(op_id, inc)
    run.launch(op_id, inc, attempt)  # events 1 QUEUED, 2 DISPATCHING, 3 RUNNING


def _append_event(run: RunBuilder, sequence: int, source: str, target: str, execution: str) -> None:
    run.raw_sql(
        "INSERT INTO events VALUES ('op-1', :sequence, :source, :target, :execution, "
        "'2026-11-29 12:00:05.000000', 'CRAFTED', 'crafted by the test')",
        sequence=sequence,
        source=source,
        target=target,
        execution=execution,
    )


def test_illegal_edge_is_invariant_6(run: RunBuilder) -> None:
    """§8.6, §2: RUNNING -> REJECTED is not an edge."""
    _running(run)
    _append_event(run, 4, "RUNNING", "REJECTED", "STARTED")
    run.raw_sql(
        "UPDATE operations SET state = 'REJECTED', execution = 'STARTED', last_event_sequence = 4"
    )
    verdict = run.verdict()
    assert invariants(verdict) == {6}
    assert "illegal edge RUNNING -> REJECTED" in verdict.violations[0].message


@pytest.mark.rule("C13")
def test_sequence_gap_is_invariant_6(run: RunBuilder) -> None:
    """§8.6, C13: event sequences are contiguous from 1."""
    _running(run)
    _append_event(run, 5, "RUNNING", "TIMED_OUT", "STARTED")
    run.raw_sql(
        "UPDATE operations SET state = 'TIMED_OUT', execution = 'STARTED', last_event_sequence = 5"
    )
    verdict = run.verdict()
    assert invariants(verdict) == {6}
    assert "sequence 5, expected 4" in verdict.violations[0].message


@pytest.mark.rule("C10")
def test_event_after_terminal_is_invariant_6(run: RunBuilder) -> None:
    """§8.6, C10: nothing follows a terminal event."""
    inc = run.start_runner()
    run.happy("op-1", inc)  # events 1-4, the last -> SUCCEEDED
    _append_event(run, 5, "SUCCEEDED", "FAILED", "STARTED")
    run.raw_sql("UPDATE operations SET last_event_sequence = 5")
    verdict = run.verdict()
    assert invariants(verdict) == {6}
    assert any("after terminal SUCCEEDED" in v.message for v in verdict.violations)


@pytest.mark.rule("C13")
def test_current_state_not_the_last_event_is_invariant_6(run: RunBuilder) -> None:
    """§8.6, C13: the current-state row equals the last event's to_state."""
    _running(run)
    run.raw_sql(
        "UPDATE operations SET state = 'TIMED_OUT', execution = 'STARTED' "
        "WHERE operation_id = 'op-1'"
    )
    verdict = run.verdict()
    assert invariants(verdict) == {6}
    assert "current state TIMED_OUT, last event RUNNING" in verdict.violations[0].message
