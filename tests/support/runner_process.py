"""Start a real runner process (``python -m runner_svc serve``) and end it by PID.

    with RunnerProcess.start(store_path, tmp_dir) as runner:
        channel = runner_access.sync_channel(runner.address)
        ...
        runner.terminate()            # SIGTERM: drain (R8), expect exit 0
        assert runner.wait(10) == 0

Leaving the ``with`` block SIGKILLs the process if it is still alive, so a
failing test never leaks a runner. ``extra_args`` and ``env`` go to the
process as given (for example ``{"TURNWIRE_CRASH_AT": "runner.after_launch_intent"}``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tests.support import runner_access

REPO_ROOT = Path(__file__).resolve().parents[2]


class RunnerProcessError(RuntimeError):
    """The runner process did not come up; carries what it printed."""


@dataclass
class RunnerProcess:
    process: subprocess.Popen[bytes]
    address: str
    store_path: Path
    log_path: Path
    address_file: Path = field(repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(
        cls,
        store_path: Path,
        work_dir: Path,
        *,
        executor: str = "echo",
        ledger_path: Path | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        start_timeout: float = 20.0,
        name: str = "runner",
    ) -> RunnerProcess:
        """Spawn ``serve --listen 127.0.0.1:0`` and wait (bounded) for its address."""
        work_dir.mkdir(parents=True, exist_ok=True)
        address_file = work_dir / f"{name}-{time.monotonic_ns()}.address"
        log_path = address_file.with_suffix(".log")
        args = [
            sys.executable,
            "-m",
            "runner_svc",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            str(store_path),
            "--address-file",
            str(address_file),
            "--executor",
            executor,
            *runner_access.runner_flags(),
            *extra_args,
        ]
        if ledger_path is not None:
            args += ["--ledger", str(ledger_path)]
        child_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                args, cwd=REPO_ROOT, env=child_env, stdout=log, stderr=subprocess.STDOUT
            )
        address = cls._await_address(process, address_file, log_path, start_timeout)
        return cls(process, address, store_path, log_path, address_file)

    @staticmethod
    def _await_address(
        process: subprocess.Popen[bytes], address_file: Path, log_path: Path, timeout: float
    ) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if address_file.exists():
                text = address_file.read_text().strip()
                if text:
                    return text
            if process.poll() is not None:
                raise RunnerProcessError(
                    f"runner exited with {process.returncode} before listening:\n"
                    + log_path.read_text(errors="replace")
                )
            time.sleep(0.02)
        _kill(process)
        raise RunnerProcessError(
            f"runner did not listen within {timeout}s:\n" + log_path.read_text(errors="replace")
        )

    def output(self) -> str:
        """Everything the process printed so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")

    def terminate(self) -> None:
        """SIGTERM by PID: the runner drains and exits 0 (R8)."""
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL by PID: a crash, nothing drains."""
        _kill(self.process)

    def wait(self, timeout: float = 20.0) -> int:
        return self.process.wait(timeout=timeout)

    def __enter__(self) -> RunnerProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _kill(self.process)


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


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
