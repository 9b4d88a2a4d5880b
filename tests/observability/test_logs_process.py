"""``--log-format auto`` in a real runner process: text on a terminal (a pty),
JSON into a file (as ``turnwire up``, the demo and the fault proxy's deployments
start it), and ``--name`` on every line as ``runner``."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import runner_access
from tests.support.runner_process import REPO_ROOT, runner_process

pytestmark = pytest.mark.timeout(60)

START_TIMEOUT = 20.0


def test_a_runner_writing_to_a_file_logs_json_lines_naming_itself(tmp_path: Path) -> None:
    with runner_process(tmp_path / "store.db", tmp_path, extra_args=["--name", "r-file"]) as runner:
        runner.terminate()
        assert runner.wait(20) == 0
        output = runner.output()
    # The address announcement is a plain line of its own (launchers read it).
    logged = [line for line in output.splitlines() if not line.startswith("listening on ")]
    lines = [json.loads(line) for line in logged]  # every other line is one JSON object
    assert any(line["msg"].startswith("runner incarnation ") for line in lines), output
    assert all(line["runner"] == "r-file" for line in lines), output
    assert all({"ts", "level", "logger", "msg"} <= set(line) for line in lines)


def _read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    """What the pty shows until ``needle`` appears (bounded)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            shown = seen.decode(errors="replace")
            raise AssertionError(f"{needle!r} never appeared; saw:\n{shown}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the child closed its side
                break
    return seen


def test_a_runner_on_a_terminal_logs_text_with_key_value_fields(tmp_path: Path) -> None:
    leader, follower = os.openpty()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner_svc",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            str(tmp_path / "store.db"),
            "--name",
            "r-tty",
            *runner_access.runner_flags(),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    try:
        # "listening on" comes after the serving line: its signal handlers are next.
        seen = _read_until(leader, b"listening on", START_TIMEOUT).decode(errors="replace")
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)
        os.close(leader)
    serving = next(line for line in seen.splitlines() if "runner incarnation" in line)
    assert not serving.lstrip().startswith("{"), serving
    assert " INFO runner_svc.app: runner incarnation " in serving
    assert serving.rstrip().endswith("runner=r-tty"), serving
