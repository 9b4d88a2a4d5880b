"""Several coordinator replicas on one PostgreSQL journal, as real processes.

The test kit's process launcher for replicas (tests/replicas, bench/replicas.py).
Built on ``turnwire.deployment.LocalDeployment`` (its runners, tokens and
ledger), with ``replica_count`` coordinators instead of one, each started
with its own ``--replica-id`` and a short lease so takeovers fit in a test.
A replica may reach PostgreSQL through a ``TcpPartition`` (``via``), so the
test can cut it off from the journal alone.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field

import psycopg
from sqlalchemy.engine import make_url

from coordinator_svc.core.model import TERMINAL_STATES
from turnwire.deployment import LocalDeployment
from turnwire.launcher import LaunchError, ManagedProcess

LEASE_TTL = 2.0
OPEN = (
    f"(state NOT IN ({', '.join(repr(s.value) for s in sorted(TERMINAL_STATES))}) OR NOT released)"
)


@dataclass
class ReplicaCluster(LocalDeployment):
    replica_count: int = 3
    lease_ttl: float = LEASE_TTL
    replicas: dict[str, ManagedProcess] = field(default_factory=dict)
    replica_ports: dict[str, int] = field(default_factory=dict)
    # Replica name -> journal URL it uses instead (a partition proxy's port).
    via: dict[str, str] = field(default_factory=dict)
    # Replica name -> extra environment (a crash point: turnwire.crashpoints).
    replica_env: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [f"replica-{index}" for index in range(1, self.replica_count + 1)]

    def start(self, timeout: float = 60.0) -> None:
        self.start_runners(timeout)
        for name in self.names:  # one after another: the first one migrates the journal
            self.start_replica(name, timeout=timeout)

    def start_replica(self, name: str, *, timeout: float = 60.0) -> None:
        port = self.replica_ports.get(name, 0)
        process = self._coordinator_process(
            f"127.0.0.1:{port}",
            self.replica_env.get(name),
            name=name,
            journal=self.via.get(name),
            extra_args=("--replica-id", name, "--lease-ttl", str(self.lease_ttl)),
        )
        address = process.start(timeout)
        self.replica_ports[name] = int(address.rsplit(":", 1)[1])
        process.wait_healthy(timeout, self._open_coordinator_channel)
        self.replicas[name] = process

    def address_of(self, name: str) -> str:
        return self.replicas[name].address

    @property
    def address(self) -> str:
        for process in self.replicas.values():
            if process.alive():
                return process.address
        raise LaunchError("no replica is running")

    def kill(self, name: str) -> None:
        self.replicas[name].kill()

    def pause(self, name: str) -> None:
        self._signal(name, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self._signal(name, signal.SIGCONT)

    def _signal(self, name: str, signum: int) -> None:
        pid = self.replicas[name].pid
        assert pid is not None, f"{name} was never started"
        os.kill(pid, signum)

    def processes(self) -> list[ManagedProcess]:
        found = list(self.replicas.values())
        for slot in self.runners:
            found.append(slot.process)
        return found

    def stop(self) -> None:
        for name in self.names:  # a paused process cannot take SIGTERM's drain
            if name in self.replicas and self.replicas[name].alive():
                self.resume(name)
        super().stop()

    # --- what the journal says (read straight from PostgreSQL) ---

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        url = make_url(self.journal)
        return psycopg.connect(
            host=url.host, port=url.port, user=url.username, dbname=url.database,
            password=url.password, autocommit=True, connect_timeout=5,
        )  # fmt: skip

    def open_leased_by(self, name: str) -> int:
        """Open operations (not terminal, or a Release owed) whose lease names replica ``name``."""
        with self.connect() as connection:
            row = connection.execute(
                "SELECT count(*) FROM operations WHERE split_part(lease_owner, '#', 1) = %s"
                f" AND {OPEN}",
                (name,),
            ).fetchone()
        assert row is not None
        return int(str(row[0]))

    def owners(self) -> dict[str, int]:
        """Open operations per owning replica name."""
        with self.connect() as connection:
            rows = connection.execute(
                "SELECT split_part(coalesce(lease_owner, '-'), '#', 1), count(*) FROM operations"
                f" WHERE {OPEN} GROUP BY 1"
            ).fetchall()
        return {str(owner): int(str(count)) for owner, count in rows}

    def row_locked_open_leased_by(self, name: str) -> tuple[list[str], list[str]]:
        """(open operations leased by ``name`` that a database session holds a row lock
        on, and those nobody does), tried with FOR UPDATE NOWAIT one by one."""
        locked: list[str] = []
        free: list[str] = []
        with self.connect() as connection:
            ids = [
                str(row[0])
                for row in connection.execute(
                    "SELECT operation_id FROM operations"
                    f" WHERE split_part(lease_owner, '#', 1) = %s AND {OPEN}",
                    (name,),
                ).fetchall()
            ]
            for operation_id in ids:
                try:
                    with connection.transaction():
                        connection.execute(
                            "SELECT 1 FROM operations WHERE operation_id = %s FOR UPDATE NOWAIT",
                            (operation_id,),
                        )
                    free.append(operation_id)
                except psycopg.errors.LockNotAvailable:
                    locked.append(operation_id)
        return locked, free

    def wait_until_none_leased_by(self, name: str, within: float) -> float:
        """Seconds until no open operation names ``name`` (bounded by ``within``)."""
        started = time.monotonic()
        while time.monotonic() - started < within:
            if self.open_leased_by(name) == 0:
                return time.monotonic() - started
            time.sleep(0.1)
        raise AssertionError(
            f"{name} still holds {self.open_leased_by(name)} open operation(s) after {within}s"
        )
