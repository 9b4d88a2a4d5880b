"""Run a bench as a user does: ``python -m bench NAME ARGS`` from the repository's root."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
STOP_TIMEOUT = 15.0


def run_bench(name: str, *args: str, timeout: float) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``python -m bench NAME ARGS``; on overrun SIGTERM
    (every bench stops its children by PID), then SIGKILL, and the test fails."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench", name, *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate(timeout=STOP_TIMEOUT)
        pytest.fail(f"python -m bench {name} did not finish within {timeout:.0f}s")
    return process.returncode, stdout, stderr
