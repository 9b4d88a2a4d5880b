"""The one process launcher for tests: each service its own real process.

Built on the launcher ``turnwire up`` runs (``turnwire.launcher.ManagedProcess``:
``--listen 127.0.0.1:0`` and ``--address-file``, so nothing races for a port;
every wait bounded). It cannot move here: the product imports it, and nothing
outside ``turnwire.testing`` may import this package. ``ServiceProcess`` adds
what tests do to a process: send it a real signal by its PID (SIGTERM to
drain, SIGKILL to crash, SIGSTOP and SIGCONT to freeze), wait for its exit
(bounded), read what it printed; leaving its ``with`` block SIGKILLs it if it
still runs, so a failing test never leaks one.

Whole deployments (a coordinator, runners, fault proxies; replicas on one
PostgreSQL journal) are ``turnwire.deployment.LocalDeployment`` and
``turnwire.testing.replicas.ReplicaCluster``, on the same launcher.

    with start_runner_process(store, work_dir, flags=[...]) as runner:
        ...  # call runner.address
        runner.terminate()   # SIGTERM by PID: it drains (R8); bounded, then SIGKILL
        assert runner.wait(10) == 0
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from turnwire.launcher import LaunchError, ManagedProcess, python_module

START_SECONDS = 20.0

__all__ = ["LaunchError", "ServiceProcess", "start_coordinator_process", "start_runner_process"]


@dataclass
class ServiceProcess(ManagedProcess):
    """A ManagedProcess with the controls tests use, each by its PID."""

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the process (nothing if it already exited)."""
        if self.popen is not None and self.popen.poll() is None:
            os.kill(self.popen.pid, signum)

    def pause(self) -> None:
        """SIGSTOP: frozen, its sockets open (a process that hangs)."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def wait(self, timeout: float = START_SECONDS) -> int:
        """Its exit code, waiting at most ``timeout`` (subprocess.TimeoutExpired after)."""
        if self.popen is None:
            raise LaunchError(f"{self.name} was never started")
        return self.popen.wait(timeout)

    def output(self) -> str:
        """Everything it printed so far (stdout and stderr)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.resume()  # a frozen process cannot die until it runs again
        self.kill()


def start_runner_process(
    store_path: Path,
    work_dir: Path,
    *,
    executor: str = "echo",
    ledger_path: Path | None = None,
    flags: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    name: str = "runner",
    timeout: float = START_SECONDS,
) -> ServiceProcess:
    """``python -m runner_svc serve`` on 127.0.0.1:0 with its store at ``store_path``,
    started and listening (bounded by ``timeout``); its log and address file in
    ``work_dir``. ``flags`` are more serve flags (the access rule: ``--plaintext
    --coordinator-secret-file F`` or TLS); ``env`` is added to this process's."""
    work_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-{time.monotonic_ns()}"  # one name may be started again
    argv = python_module(
        "runner_svc", "serve",
        "--listen", "127.0.0.1:0",
        "--store", str(store_path),
        "--executor", executor,
        *(("--ledger", str(ledger_path)) if ledger_path is not None else ()),
        *flags,
    )  # fmt: skip
    process = ServiceProcess(
        name,
        argv,
        work_dir / f"{stem}.log",
        work_dir / f"{stem}.address",
        env=dict(env or {}),
        cwd=cwd,
    )
    process.start(timeout)
    return process


def start_coordinator_process(
    journal_url: str,
    work_dir: Path,
    *,
    flags: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    name: str = "coordinator",
    timeout: float = START_SECONDS,
) -> ServiceProcess:
    """``python -m coordinator_svc serve --migrate`` on 127.0.0.1:0 and ``journal_url``,
    started and listening (bounded by ``timeout``); its log and address file in
    ``work_dir``. ``flags`` are more serve flags (how it reaches runners: ``--plaintext
    --runner-secret-file F``, ``--runner NAME=ADDRESS``...); ``env`` is added to
    this process's."""
    work_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-{time.monotonic_ns()}"
    argv = python_module(
        "coordinator_svc", "serve",
        "--listen", "127.0.0.1:0",
        "--journal-url", journal_url,
        "--migrate",
        *flags,
    )  # fmt: skip
    process = ServiceProcess(
        name, argv, work_dir / f"{stem}.log", work_dir / f"{stem}.address",
        env=dict(env or {}), cwd=cwd,
    )  # fmt: skip
    process.start(timeout)
    return process
