"""Start and stop a local Turnwire deployment: each service its own process.

Used by ``turnwire up`` (and its demo), by the chaos command, and by tests that
need real processes. Every process is started with ``--listen 127.0.0.1:0``
(or a remembered port on restart) and ``--address-file``, so nothing races for
ports; every wait is bounded; every process is ended by its PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


class LaunchError(RuntimeError):
    """A process did not start, or did not become healthy, in time."""


@dataclass
class ManagedProcess:
    """One child process that announces its address in a file."""

    name: str
    argv: Sequence[str]
    log_path: Path
    address_file: Path
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None  # default: the launcher's own
    popen: subprocess.Popen[bytes] | None = None
    address: str = ""

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self, timeout: float = 30.0) -> str:
        """Spawn, wait (bounded) for the address file, return the address."""
        self.address_file.unlink(missing_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.popen = subprocess.Popen(
                [*self.argv, "--address-file", str(self.address_file)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                cwd=self.cwd,
                start_new_session=True,  # Ctrl-C in the terminal reaches only the launcher
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise LaunchError(
                    f"{self.name} exited with {self.popen.returncode} before listening; "
                    f"see {self.log_path}:\n{self.log_tail()}"
                )
            if self.address_file.exists():
                text = self.address_file.read_text().strip()
                if text:
                    self.address = text
                    return text
            time.sleep(0.05)
        self.kill()
        raise LaunchError(f"{self.name} did not announce an address within {timeout:.0f}s")

    def wait_healthy(
        self, timeout: float = 30.0, open_channel: Callable[[str], Any] | None = None
    ) -> None:
        """Poll grpc health (bounded) until the server says SERVING. ``open_channel``
        makes the channel (a runner's health answers only its coordinator's
        credentials: turnwire.transport_security.RunnerCredentials.sync_channel)."""
        deadline = time.monotonic() + timeout
        with (open_channel or grpc.insecure_channel)(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                if self.popen is not None and self.popen.poll() is not None:
                    raise LaunchError(f"{self.name} exited while starting:\n{self.log_tail()}")
                time.sleep(0.1)
        raise LaunchError(f"{self.name} at {self.address} not SERVING within {timeout:.0f}s")

    def terminate(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (graceful drain), then SIGKILL if it outlives ``timeout``."""
        if self.popen is None or self.popen.poll() is not None:
            return self.popen.returncode if self.popen else None
        self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return self.kill()

    def kill(self) -> int | None:
        """SIGKILL by PID and reap."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.kill()
        return self.popen.wait(10)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def python_module(module: str, *args: str) -> list[str]:
    """argv running ``python -m module args`` with this interpreter."""
    return [sys.executable, "-m", module, *args]
