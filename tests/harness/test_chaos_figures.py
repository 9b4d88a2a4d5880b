"""The chaos summary's count of UNKNOWN operations the ledger shows never ran."""

from __future__ import annotations

from tests.harness.run_builder import RunBuilder
from turnwire.chaos import unknown_never_executed


def test_unknown_with_no_ledger_line_is_counted(run: RunBuilder) -> None:
    """An ambiguity whose executor never started (no ledger line) counts; a success does not."""
    inc = run.start_runner()
    run.happy("op-happy", inc)
    run.ambiguous("op-ambiguous", inc)
    verdict = run.verdict()
    assert verdict.figures.ambiguous == 1
    assert unknown_never_executed(verdict) == 1
