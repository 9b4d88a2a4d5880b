"""The verdict's status, its figures, and how it is shown (render, JSON)."""

from __future__ import annotations

import json

from tests.harness.run_builder import RunBuilder, invariants
from turnwire.harness import Status, render, verdict_json


def test_run_without_replay_reconcile_or_ambiguity_proves_nothing(run: RunBuilder) -> None:
    """Anti-vacuity floor: a clean run that exercised nothing hard is not a pass."""
    inc = run.start_runner()
    run.happy("op-1", inc)
    run.happy("op-2", inc)
    verdict = run.verdict()
    assert verdict.violations == ()
    assert verdict.status is Status.VACUOUS
    assert not verdict.passed
    assert "PROVES NOTHING" in render(verdict)


def test_empty_run_proves_nothing(run: RunBuilder) -> None:
    """Anti-vacuity floor: a journal with no operations proves nothing."""
    run.start_runner()
    verdict = run.verdict()
    assert verdict.status is Status.VACUOUS
    assert verdict.figures.operations == 0


def test_each_exercise_alone_lifts_the_floor(run: RunBuilder) -> None:
    """Anti-vacuity floor: one reconcile without resend is enough to pass."""
    inc = run.start_runner()
    run.lost_reply("op-1", inc)
    verdict = run.verdict()
    assert verdict.status is Status.PASS
    assert verdict.figures.reconciled_without_resend == 1
    assert verdict.figures.replays == 0
    assert verdict.figures.ambiguous == 0


def test_violations_fail_even_a_vacuous_run(run: RunBuilder) -> None:
    """A violation makes the verdict FAIL whatever was exercised (§8)."""
    inc = run.start_runner()
    run.happy("op-1", inc)
    run.ledger_line("op-1", inc.incarnation_id, 1)
    verdict = run.verdict()
    assert verdict.status is Status.FAIL
    assert 1 in invariants(verdict)


def test_figures_count_terminal_states_executions_and_ambiguity(run: RunBuilder) -> None:
    """Figures: operations by terminal state, ledger lines, replays, reconciles, ambiguity."""
    inc = run.start_runner()
    run.happy("op-happy", inc)
    run.replayed("op-replay", inc)
    run.ambiguous("op-ambiguous", inc)
    figures = run.verdict().figures
    assert figures.operations == 3
    assert dict(figures.by_terminal_state) == {"SUCCEEDED": 2, "TIMED_OUT": 1}
    assert figures.non_terminal == 0
    assert figures.executions == 2
    assert figures.duplicates == 0
    assert figures.lost == 0
    assert (figures.replays, figures.reconciled_without_resend, figures.ambiguous) == (1, 0, 1)


def test_render_shows_each_violation_with_the_full_history(run: RunBuilder) -> None:
    """render: a violation comes with its operation's events, attempts, runner rows and ledger."""
    inc = run.start_runner()
    run.replayed("op-bad", inc)
    run.ledger_line("op-bad", inc.incarnation_id, 2)
    run.lost_reply("op-good", inc)
    text = render(run.verdict())
    assert text.startswith("FAIL: ")
    section = text.split("operation op-bad\n", 1)[1].split("\n\n", 1)[0]
    assert "VIOLATION invariant 1: 2 executor starts" in section
    assert "#1 - -> QUEUED" in section
    assert "#2 QUEUED -> DISPATCHING" in section
    assert "attempt 2 -> runner-a/" in section  # the DISPATCHING event detail
    assert "replay: absent on the bound incarnation" in section
    assert "    1: runner-a/" in section and "UNKNOWN" in section  # attempt rows
    assert "    2: runner-a/" in section
    assert "runner-a.db" in section and ": SUCCEEDED [STARTED] attempt 2" in section
    assert section.count("    attempt 2 on ") == 2  # both ledger lines
    assert "operation op-good" not in text  # only violating operations get a history
    assert "figures:" in text and "reconciled without resend" in text


def test_verdict_json_carries_status_violations_figures_and_histories(run: RunBuilder) -> None:
    """verdict_json: one JSON-serializable object with the violating operations' histories."""
    inc = run.start_runner()
    run.happy("op-1", inc)
    run.ledger_line("op-1", inc.incarnation_id, 1)
    document = json.loads(json.dumps(verdict_json(run.verdict())))
    assert document["status"] == "FAIL"
    assert {v["invariant"] for v in document["violations"]} == {1, 3}
    assert document["figures"]["executions"] == 2
    history = document["histories"]["op-1"]
    assert [e["to_state"] for e in history["events"]] == [
        "QUEUED",
        "DISPATCHING",
        "RUNNING",
        "SUCCEEDED",
    ]
    assert len(history["ledger"]) == 2
    assert history["runner_rows"][0]["state"] == "SUCCEEDED"


def test_render_shows_what_runners_hold_about_unknown_operations(run: RunBuilder) -> None:
    """render: an operation only a runner and the ledger know is shown with their records."""
    inc = run.start_runner()
    run.lost_reply("op-1", inc)
    run.admit("op-ghost", inc, 1)
    run.ledger_line("op-ghost", inc.incarnation_id, 1)
    text = render(run.verdict())
    section = text.split("operation op-ghost\n", 1)[1].split("\n\n", 1)[0]
    assert "(unknown to the journal)" in section
    assert ": ACCEPTED [NOT_STARTED] attempt 1 on " in section
    assert f"attempt 1 on {inc.incarnation_id} started=" in section


def test_a_store_named_twice_is_read_once(run: RunBuilder) -> None:
    """check_run: repeating --runner-store does not double the runner rows."""
    inc = run.start_runner()
    run.lost_reply("op-1", inc)
    run.store_paths.append(run.store_paths[0])
    verdict = run.verdict()
    assert verdict.violations == ()
    assert len(verdict.run.histories["op-1"].runner_rows) == 1
