"""A real runner process for tests, on turnwire.testing's process launcher.

    with runner_process(store_path, tmp_dir) as runner:
        channel = runner_access.sync_channel(runner.address)
        ...
        runner.terminate()            # SIGTERM by PID: drain (R8), expect exit 0
        assert runner.wait(10) == 0

``runner_process`` adds what every test runner gets: the session's runner
secret (tests/support/runner_access.py), this checkout as its working
directory and PYTHONPATH (so ``python:tests....`` executors import). Leaving
the ``with`` block SIGKILLs the process if it is still alive. ``extra_args``
and ``env`` go to the process as given (for example
``{"TURNWIRE_CRASH_AT": "runner.after_launch_intent"}``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support import runner_access
from turnwire.testing.processes import ServiceProcess, start_runner_process

REPO_ROOT = Path(__file__).resolve().parents[2]


def runner_process(
    store_path: Path,
    work_dir: Path,
    *,
    executor: str = "echo",
    ledger_path: Path | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    start_timeout: float = 20.0,
    name: str = "runner",
) -> ServiceProcess:
    """``serve --listen 127.0.0.1:0``, started and listening (bounded)."""
    return start_runner_process(
        store_path,
        work_dir,
        executor=executor,
        ledger_path=ledger_path,
        flags=[*runner_access.runner_flags(), *extra_args],
        env={"PYTHONPATH": str(REPO_ROOT), **(env or {})},
        cwd=REPO_ROOT,
        name=name,
        timeout=start_timeout,
    )


def run_cli(
    args: Sequence[str], timeout: float = 30.0, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m runner_svc ARGS`` to completion (bounded) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "runner_svc", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
