"""Proving a deployment: the invariant oracle (PROTOCOL.md §8 items 1-6).

After a run, ``check_run(journal_url, runner_stores, ledger)`` joins the
coordinator journal, every runner store and the metered ledger and returns a
:class:`Verdict`; ``render(verdict)`` explains it. From the shell:
``turnwire check --journal-url URL --runner-store PATH ... --ledger PATH``.
"""

from turnwire.harness.oracle import (
    DEFAULT_CLOCK_SKEW,
    Figures,
    Status,
    Verdict,
    check,
    check_run,
)
from turnwire.harness.oracle_history import OperationHistory, RunRecord
from turnwire.harness.oracle_invariants import Violation
from turnwire.harness.oracle_load import OracleInputError, load_run
from turnwire.harness.oracle_render import render, verdict_json

__all__ = [
    "DEFAULT_CLOCK_SKEW",
    "Figures",
    "OperationHistory",
    "OracleInputError",
    "RunRecord",
    "Status",
    "Verdict",
    "Violation",
    "check",
    "check_run",
    "load_run",
    "render",
    "verdict_json",
]
