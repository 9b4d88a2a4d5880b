"""Run a bench as a user does: ``python -m bench NAME ARGS`` from the repository's root."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.e2e_processes import run_within

REPO_ROOT = Path(__file__).resolve().parents[2]
STOP_TIMEOUT = 15.0


def run_bench(name: str, *args: str, timeout: float) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``python -m bench NAME ARGS``; on overrun SIGTERM
    (every bench stops its children by PID), then SIGKILL, and the test fails."""
    done = run_within(
        [sys.executable, "-m", "bench", name, *args], timeout, cwd=REPO_ROOT, grace=STOP_TIMEOUT
    )
    if done is None:
        pytest.fail(f"python -m bench {name} did not finish within {timeout:.0f}s")
    return done
