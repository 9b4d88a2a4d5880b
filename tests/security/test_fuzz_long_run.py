"""The fuzzer's long run (issue 11, ``python -m tests.security.fuzz_long_run``) works: a
12-second run against real processes finds no crash, leaks no slot, and a normal turn
still succeeds after it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

# Real processes fuzzed for 12 s on a 2-core machine: alone, as the benchmarks run, so
# a second pytest worker's load does not push its calls past their deadlines.
pytestmark = [pytest.mark.slow, pytest.mark.serial]


def test_a_short_fuzz_run_of_both_services_passes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.security.fuzz_long_run", "--minutes", "0.2", "--json"],
        capture_output=True, text=True, timeout=110, check=False, cwd=REPO_ROOT,
    )  # fmt: skip
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["crashes"] == 0, report["crash_examples"]
    assert done.returncode == 0, (report, done.stderr[-2000:])
    methods = {"SubmitTurn", "GetOperation", "ListOperations", "CancelOperation",
               "WatchOperation", "SubmitAndWatch", "GetOperationStatus",
               "BatchGetOperationStatus", "Dispatch", "Cancel", "Release", "GetRunnerInfo",
               "WatchOperations", "StreamOutput"}  # fmt: skip
    assert set(report["calls"]) == methods and min(report["calls"].values()) > 0
    assert report["leaked_slots"] == 0 and report["final_turn"] == "SUCCEEDED"
    assert report["ledger"]["unknown"] == 0 and report["ledger"]["repeated"] == 0
