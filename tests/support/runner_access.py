"""The credentials the tests' runners demand and their coordinators present (issue 11).

A runner serves only its coordinator, so every runner a test starts is given
an access rule and everything that calls it the matching credentials: one
random shared secret per test session (plaintext on 127.0.0.1, as the tests
run). Tests of the gate itself make their own secrets and certificates.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from turnwire.secure_channels import runner_aio_channel, runner_sync_channel
from turnwire.transport_security import RunnerAccess, RunnerCredentials, new_secret

SECRET = new_secret()
ACCESS = RunnerAccess(secret=SECRET)
CREDENTIALS = RunnerCredentials(secret=SECRET)


def aio_channel(address: str, **kwargs: Any) -> Any:
    """A grpc.aio channel to a test runner that presents the session's secret."""
    return runner_aio_channel(CREDENTIALS, address, **kwargs)


def sync_channel(address: str, **kwargs: Any) -> Any:
    """A synchronous channel to a test runner that presents the session's secret."""
    return runner_sync_channel(CREDENTIALS, address, **kwargs)


def secret_file() -> Path:
    """The session's secret in a file (mode 600, in a private temp dir removed at exit),
    for runner and coordinator processes (``--coordinator-secret-file``,
    ``--runner-secret-file``)."""
    global _secret_path
    if _secret_path is None:
        directory = Path(tempfile.mkdtemp(prefix="turnwire-test-secret-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        path = directory / "runner-secret"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(SECRET + "\n")
        _secret_path = path
    return _secret_path


_secret_path: Path | None = None


def runner_flags() -> list[str]:
    """What a test's runner process is started with: plaintext on loopback, the secret."""
    return ["--plaintext", "--coordinator-secret-file", str(secret_file())]


def coordinator_flags() -> list[str]:
    """What a test's coordinator process is started with: plaintext, the runners' secret."""
    return ["--plaintext", "--runner-secret-file", str(secret_file())]
