"""The chaos and demo summaries' counts: UNKNOWN operations the ledger shows never
ran (all, and those a changed incarnation ended), and stale Dispatches re-sent."""

from __future__ import annotations

import pytest

from tests.harness.run_builder import RunBuilder
from turnwire.chaos import unknown_never_executed
from turnwire.harness.outcomes import stale_refusals


def test_unknown_with_no_ledger_line_is_counted(run: RunBuilder) -> None:
    """An ambiguity whose executor never started (no ledger line) counts; a success does not."""
    inc = run.start_runner()
    run.happy("op-happy", inc)
    run.ambiguous("op-ambiguous", inc)
    verdict = run.verdict()
    assert verdict.figures.ambiguous == 1
    assert unknown_never_executed(verdict) == 1


def test_unknown_never_executed_is_counted_by_its_reason(run: RunBuilder) -> None:
    """Issue 27's count: an INCARNATION_CHANGED ambiguity with no ledger line is one of
    them; asked for another reason, it is not."""
    inc = run.start_runner()
    run.ambiguous("op-ambiguous", inc)
    verdict = run.verdict()
    assert unknown_never_executed(verdict, "INCARNATION_CHANGED") == 1
    assert unknown_never_executed(verdict, "RECONCILE_DEADLINE") == 0


@pytest.mark.rule("C6c")
def test_each_dispatch_refused_stale_counts_once(run: RunBuilder) -> None:
    """C6c's cost in the summaries: every attempt closed REFUSED with DISPATCH_STALE
    (re-sent with a fresh stamp) counts; a full runner's refusal does not."""
    inc = run.start_runner()
    run.submit("op-late")
    run.dispatch("op-late", inc)
    run.refuse("op-late", inc, "DISPATCH_STALE")
    run.submit("op-full")
    run.dispatch("op-full", inc)
    run.refuse("op-full", inc, "NO_FREE_SLOT")
    assert stale_refusals(run.verdict(healed=False).run.histories.values()) == 1
