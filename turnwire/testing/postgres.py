"""A throwaway PostgreSQL cluster (tests, benchmarks): initdb, start on 127.0.0.1, stop, delete.

The server binaries (initdb, pg_ctl, postgres) must be on PATH. initdb
refuses to run as root, so as root every server command runs as the
``postgres`` OS user (runuser). The cluster listens only on 127.0.0.1, on a
free port, with its unix socket inside its own temp dir and trust auth.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import pytest

SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")
START_ATTEMPTS = 3  # a free port can be taken between probing and binding
READY_DEADLINE = 30.0
COMMAND_TIMEOUT = 60.0


class ClusterStartError(RuntimeError):
    """The binaries exist but the cluster did not come up."""


def missing_binary() -> str | None:
    """What is missing to start a cluster (first server binary not on PATH, ...), or None."""
    for name in SERVER_BINARIES:
        if shutil.which(name) is None:
            return name
    if os.geteuid() == 0:
        # initdb refuses root, so the server runs as the postgres OS user.
        if shutil.which("runuser") is None:
            return "runuser (to run initdb as the postgres user when root)"
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "an OS user named postgres (initdb refuses to run as root)"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresCluster:
    """One cluster in its own temp dir. ``start()`` then ``stop()`` (always, in finally)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="turnwire-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        self._as_root = os.geteuid() == 0

    # -- commands -------------------------------------------------------------

    def _run(self, argv: Sequence[str], timeout: float = COMMAND_TIMEOUT) -> None:
        command = ["runuser", "-u", "postgres", "--", *argv] if self._as_root else list(argv)
        try:
            completed = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as error:
            raise ClusterStartError(f"{' '.join(argv)} took over {timeout}s") from error
        if completed.returncode != 0:
            raise ClusterStartError(
                f"{' '.join(argv)} exited {completed.returncode}: "
                f"{completed.stderr.strip() or completed.stdout.strip()}\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        if self._as_root:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        # --no-sync: a throwaway cluster need not survive a power cut while
        # being created; the running server keeps fsync on.
        initdb = ["initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust"]
        self._run([*initdb, "-E", "UTF8", "--no-instructions", "--no-sync"])
        last_error: Exception | None = None
        for _ in range(START_ATTEMPTS):
            self.port = _free_port()
            try:
                self._pg_ctl_start()
                self._wait_ready()
                return
            except ClusterStartError as error:
                last_error = error
                self.stop_server()
        raise ClusterStartError(f"PostgreSQL did not start: {last_error}")

    def _pg_ctl_start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} "
            f"-c unix_socket_directories={self.root} "
            "-c max_connections=200 -c shared_buffers=32MB "
            # A session zone far from UTC, so tests see any code that forgets
            # to normalize timestamps to UTC.
            "-c timezone=Pacific/Chatham"
        )
        pg_ctl = ["pg_ctl", "start", "-D", str(self.data), "-l", str(self.log)]
        self._run([*pg_ctl, "-w", "-t", "30", "-o", options])

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_DEADLINE
        while True:
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError as error:
                if time.monotonic() > deadline:
                    message = f"not ready after {READY_DEADLINE}s: {error}"
                    raise ClusterStartError(message) from error
                time.sleep(0.1)

    def postmaster_pid(self) -> int | None:
        try:
            first_line = (self.data / "postmaster.pid").read_text().splitlines()[0]
            return int(first_line)
        except (OSError, ValueError, IndexError):
            return None

    def stop_server(self) -> None:
        """Stop the server: pg_ctl fast, then SIGKILL the postmaster by PID if it lingers."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        with contextlib.suppress(ClusterStartError):
            self._run(["pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w", "-t", "20"])
        # A clean stop removes postmaster.pid; only a lingering server keeps it
        # (checking it first avoids signalling a recycled PID).
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        """Stop the server and delete the cluster's directory."""
        try:
            self.stop_server()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- databases ------------------------------------------------------------

    def dsn(self, database: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={database}"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        """Run one statement as superuser outside a transaction (CREATE DATABASE needs that)."""
        with psycopg.connect(self.dsn("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.encode())  # test-controlled SQL, never user input

    def create_database(self) -> str:
        """A fresh empty database; returns its name."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        self.admin(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def running_cluster() -> Iterator[PostgresCluster]:
    """A started PostgreSQL cluster of its own, stopped and deleted after (for a pytest
    fixture or test); skips the test without the binaries, or when it fails to start
    (fails it instead with CI=true)."""
    missing = missing_binary()
    if missing is not None:
        pytest.skip(f"cannot start a PostgreSQL test cluster, missing: {missing}")
    cluster = PostgresCluster()
    try:
        try:
            cluster.start()
        except (ClusterStartError, OSError) as error:
            if os.environ.get("CI") == "true":
                pytest.fail(f"PostgreSQL cluster failed to start under CI: {error}")
            pytest.skip(f"PostgreSQL cluster failed to start: {error}")
        yield cluster
    finally:
        cluster.stop()
