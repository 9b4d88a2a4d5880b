"""`turnwire up` as a user runs it: a real process, its services real processes, stopped
with SIGINT (Ctrl-C) by PID; and the README's Python SDK example run against it as
it prints its variables.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from turnwire.client import AdminClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
REPO_ROOT = Path(__file__).resolve().parents[2]
READY = "running; Ctrl-C stops everything"
STARTUP_SECONDS = 120.0


def free_ports(count: int, *, consecutive: int = 1) -> list[int]:
    """``count`` loopback port bases, each followed by ``consecutive - 1`` free ports, all
    distinct (held open together while chosen; bounded tries)."""
    with ExitStack() as held:
        bases: list[int] = []
        for _ in range(200):
            if len(bases) == count:
                return bases
            first = held.enter_context(socket.socket())
            first.bind(("127.0.0.1", 0))
            base = first.getsockname()[1]
            try:
                for offset in range(1, consecutive):
                    follower = held.enter_context(socket.socket())
                    follower.bind(("127.0.0.1", base + offset))
            except OSError:
                continue
            bases.append(base)
    raise RuntimeError(f"no {count} free port ranges of {consecutive} found")


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("TURNWIRE_", "GRPC_"))}


@contextmanager
def turnwire_up(*args: str) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """`turnwire up ARGS` until it prints READY; yields it and the lines so far. Ends it
    by PID (SIGKILL) if the test left it running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "turnwire.cli", "up", *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_environment(),
    )
    try:
        lines: list[str] = []
        assert process.stdout is not None
        deadline = time.monotonic() + STARTUP_SECONDS
        # os.read on the pipe itself: select() cannot see what a text wrapper buffered.
        pending = b""
        descriptor = process.stdout.fileno()
        while READY not in lines:
            ready, _, _ = select.select([descriptor], [], [], max(0, deadline - time.monotonic()))
            chunk = os.read(descriptor, 65536) if ready else b""
            assert chunk, "turnwire up did not get ready:\n" + "\n".join(lines)
            pending += chunk
            *complete, pending = pending.split(b"\n")
            lines += [line.decode() for line in complete]
        assert not pending, pending  # it waits for Ctrl-C after READY: nothing else came
        yield process, lines
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)


def stop(process: subprocess.Popen[str]) -> tuple[int, list[str]]:
    """Ctrl-C: SIGINT by PID; its exit status and what it printed while stopping."""
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=90)
    return process.returncode, rest.splitlines()


def _printed(lines: list[str], pattern: str) -> re.Match[str]:
    for line in lines:
        found = re.search(pattern, line)
        if found:
            return found
    raise AssertionError(f"no line matches {pattern!r} in:\n" + "\n".join(lines))


def test_up_pins_ports_and_slots_serves_the_console_and_says_what_it_leaves(
    tmp_path: Path,
) -> None:
    """--port, --runner-port, --metrics-port, --console, --writable/--read-only-slots take
    effect; it prints the admin token and the tokens file (not *.json); at Ctrl-C it
    exits 0 and lists what stays in the data directory and how to remove it."""
    data = tmp_path / "data"
    coordinator, runner, metrics = free_ports(3, consecutive=2)
    with turnwire_up(
        "--runners", "1", "--data-dir", str(data), "--port", str(coordinator),
        "--runner-port", str(runner), "--metrics-port", str(metrics), "--console",
        "--writable-slots", "3", "--read-only-slots", "2",
    ) as (process, lines):  # fmt: skip
        _printed(lines, rf"^  coordinator +pid \d+ +127\.0\.0\.1:{coordinator}$")
        _printed(lines, rf"^  runner-1 +pid \d+ +127\.0\.0\.1:{runner}$")
        _printed(lines, rf"^  coordinator +metrics https://127\.0\.0\.1:{metrics}/metrics$")
        _printed(lines, rf"^  runner-1 +metrics https://127\.0\.0\.1:{metrics + 1}/metrics$")
        _printed(lines, r"^  console +https://127\.0\.0\.1:\d+/")
        admin_token = _printed(lines, r"^admin token \(principal 'admin', scope admin\): (\S+)$")
        tokens_file = _printed(lines, r"^tokens file: (\S+)$").group(1)
        assert Path(tokens_file) == data / "tokens" and Path(tokens_file).is_file()
        assert not list(data.glob("*.json"))
        with AdminClient(
            f"127.0.0.1:{coordinator}", admin_token.group(1), ca_file=data / "certs" / "ca.pem"
        ) as admin:
            deadline = time.monotonic() + 30
            seen = admin.runners()
            while not seen[0].writable_slots and time.monotonic() < deadline:
                time.sleep(0.2)  # the slots are known once the runner's watch is open
                seen = admin.runners()
        assert (seen[0].name, seen[0].writable_slots, seen[0].read_only_slots) == (
            "runner-1",
            3,
            2,
        )
        code, after = stop(process)
    assert code == 0, after
    assert f"left in {data}:" in after and f"remove it all with: rm -rf {data}" in after
    for shown in ("journal.db", "runner-N/store.db", "ledger.jsonl", "tokens", "certs/", "logs/"):
        _printed(after, rf"^  {re.escape(shown)} ")
    assert (data / "journal.db").exists() and (data / "runner-1" / "store.db").exists()


def readme_sdk_example() -> str:
    """The README's Python SDK example: its python block that uses from_env()."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)
    examples = [block for block in blocks if "TurnwireClient.from_env()" in block]
    assert len(examples) == 1, "README.md needs one python block using TurnwireClient.from_env()"
    return examples[0]


def test_the_readme_sdk_example_runs_against_turnwire_up_as_printed(tmp_path: Path) -> None:
    """The README's SDK example, with the TURNWIRE_* variables exactly as `turnwire up`
    prints them (TLS by default), runs a turn to SUCCEEDED."""
    with turnwire_up("--runners", "1", "--data-dir", str(tmp_path / "data")) as (process, lines):
        variables = dict(re.findall(r"(TURNWIRE_[A-Z_]+)=(\S+)", _printed(lines, "^try: ").string))
        assert set(variables) == {"TURNWIRE_ADDRESS", "TURNWIRE_TOKEN", "TURNWIRE_CA_FILE"}
        done = subprocess.run(
            [sys.executable, "-c", readme_sdk_example()],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
            env={**_environment(), **variables},
        )
        assert done.returncode == 0, done.stderr
        assert "SUCCEEDED" in done.stdout
        code, after = stop(process)
    assert code == 0, after
