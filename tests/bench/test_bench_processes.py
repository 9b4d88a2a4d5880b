"""The e2e bench runs the coordinator as its own process and reports CPU by process (issue 10).

The text report names each process's CPU per op and still carries the
coordinator's counters (read from the coordinator process, not from inside
the bench); every process it started is gone when it exits; it listens on
127.0.0.1 only. And bench/counting_coordinator.py (``python -m
bench.counting_coordinator``) answers a counters request.
Never judged on speed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.bench.test_bench_smoke import run_e2e
from turnwire.launcher import ManagedProcess

REPO_ROOT = Path(__file__).resolve().parents[2]
TURNS = 5
SNAPSHOT_WAIT = 10.0

FLOAT = r"\d+\.\d+"
CPU_LINE = re.compile(
    rf"CPU ms/op by process: client \(this process\) {FLOAT}, coordinator {FLOAT}, "
    rf"runner-1 {FLOAT}; stack \(client\+coordinator\+runners\) {FLOAT}"
)
COUNTER_LINES = (
    re.compile(rf"journal commits/op {FLOAT} \(by the dispatcher {FLOAT}"),
    re.compile(rf"journal reads/op {FLOAT}; calls/op by method: .*submit {FLOAT}"),
    re.compile(rf"coordinator->runner RPCs/op {FLOAT}: preflight {FLOAT} .*Dispatch {FLOAT}"),
)


def system_block(stdout: str, label: str) -> str:
    """The report's lines for one configuration ("sqlite x1"), up to the next one."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(label + " "))
    end = next(
        (i for i in range(start + 1, len(lines)) if not lines[i].startswith("      ")), len(lines)
    )
    return "\n".join(lines[start:end])


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(int(entry))
    return found


@pytest.mark.slow
def test_bench_text_report_has_cpu_by_process_and_counters() -> None:
    """Issue 10: CPU per op of the client, the coordinator process and the runner, and the
    coordinator's counters; every process stopped by PID; 127.0.0.1 only."""
    code, stdout, stderr = run_e2e("--turns", str(TURNS), "--skip-postgres", "--keep")
    kept = re.search(r"bench files kept in (\S+)", stderr)
    assert kept is not None, stderr[-3000:]
    root = Path(kept.group(1))
    try:
        assert code == 0, stderr[-3000:]
        for label in ("sqlite x1", "sqlite x16", "sqlite x64"):
            block = system_block(stdout, label)
            assert CPU_LINE.search(block), block
            for pattern in COUNTER_LINES:
                assert pattern.search(block), (pattern.pattern, block)
        # The latency table: every row at every level, with p50, p99 and their ratio.
        table = [
            line for line in stdout.split("latency by calls in flight", 1)[1].splitlines()[2:]
            if line.strip()
        ]  # fmt: skip
        found = {(line.split()[-7], int(line.split()[-6])) for line in table}
        assert found == {(row, n) for row in ("echo", "sqlite") for n in (1, 16, 64)}, table
        for line in table:
            p50, p99, ratio = (float(x) for x in line.split()[-3:])
            assert ratio == pytest.approx(p99 / p50, rel=0.05), line  # of figures rounded
        started = re.search(
            r"sqlite: coordinator pid (\d+) at 127\.0\.0\.1:\d+, runner-1 pid (\d+) at "
            r"127\.0\.0\.1:\d+",
            stderr,
        )
        assert started is not None, stderr[-3000:]
        coordinator, runner = int(started.group(1)), int(started.group(2))
        assert re.search(
            rf"sqlite: stopped coordinator pid {coordinator} \(exit 0\), runner-1 pid {runner} ",
            stderr,
        ), stderr[-3000:]
        assert pid_gone(coordinator) and pid_gone(runner)
        assert processes_mentioning(str(root)) == []
        for address_file in root.glob("*.addr"):
            assert address_file.read_text().startswith("127.0.0.1:"), address_file
        counters = json.loads((root / "sqlite-coordinator-counters.json").read_text())
        assert counters["pid"] == coordinator
    finally:
        shutil.rmtree(root, ignore_errors=True)


def wait_for_snapshot(path: Path, seq: int) -> dict[str, object]:
    deadline = time.monotonic() + SNAPSHOT_WAIT
    while time.monotonic() < deadline:
        try:
            snapshot: dict[str, object] = json.loads(path.read_text())
        except (OSError, ValueError):
            snapshot = {}
        if snapshot.get("seq") == seq:
            return snapshot
        time.sleep(0.02)
    pytest.fail(f"no snapshot {seq} in {path} within {SNAPSHOT_WAIT:.0f}s")


@pytest.mark.slow
def test_counting_coordinator_writes_its_counters_on_sigusr1(tmp_path: Path) -> None:
    """The bench's coordinator process: the real coordinator, counters on request, SIGTERM
    stops it cleanly (exit 0)."""
    tokens = tmp_path / "tokens"
    tokens.write_text("bench " + "0" * 64 + "\n")
    tokens.chmod(0o600)
    counters = tmp_path / "counters.json"
    argv = [
        sys.executable, "-m", "bench.counting_coordinator",
        "--counters-file", str(counters),
        "serve",
        "--listen", "127.0.0.1:0",
        "--journal-url", f"sqlite:///{tmp_path / 'journal.db'}",
        "--tokens-file", str(tokens),
        "--migrate",
        "--plaintext",
        "--log-level", "WARNING",
    ]  # fmt: skip
    process = ManagedProcess(
        "coordinator", argv, tmp_path / "log", tmp_path / "addr", cwd=REPO_ROOT
    )
    try:
        assert process.start(60.0).startswith("127.0.0.1:")
        process.wait_healthy(60.0)
        first = wait_for_snapshot(counters, 0)
        assert process.pid is not None
        os.kill(process.pid, signal.SIGUSR1)
        second = wait_for_snapshot(counters, 1)
        assert second["pid"] == first["pid"] == process.pid
        assert second["journal_commits"] == 0 and second["due_pending"] is False
        assert second["event_loop"] in ("uvloop", "asyncio")
        dispatcher = second["dispatcher"]
        assert isinstance(dispatcher, dict)
        assert dispatcher["commits"] == 0 and isinstance(dispatcher["rpc_calls"], dict)
        assert isinstance(second["journal_calls"], dict)
        assert process.terminate(15.0) == 0, process.log_tail()
    finally:
        process.kill()
