"""The processes bench/e2e.py measures: start, stop (by PID), CPU, counters.

Every process is started with ``--listen 127.0.0.1:0`` and an address file
(``turnwire.launcher.ManagedProcess``) and stopped by its own PID. The
coordinator runs as ``python -m bench.counting_coordinator`` (the real coordinator
with a counting journal); its counters are read by asking it for a snapshot
(SIGUSR1), never from inside this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from bench import REPO_ROOT
from turnwire.certs import issue_deployment
from turnwire.launcher import ManagedProcess, python_module
from turnwire.secure_channels import channel_credentials, runner_sync_channel
from turnwire.transport_security import (
    RunnerCredentials,
    TlsMaterial,
    read_secret_file,
    write_secret_file,
)

MAX_RUNNERS = 8  # runner certificates a TLS run makes

START_TIMEOUT = 60.0  # one process start, or one PostgreSQL cluster start
STOP_GRACE = 5.0
SNAPSHOT_TIMEOUT = 10.0  # one counters snapshot from the coordinator
SNAPSHOT_POLL = 0.005


class BenchBroke(RuntimeError):
    """Something the bench needs did not work (not: something was slow)."""


# Calls in flight per measured loop (e2e's --in-flight): one at a time, the 16 the
# peer harness runs, and 64, four times that, where queueing shows in the tail.
IN_FLIGHT = (1, 16, 64)
# Up to this many in flight a loop runs ``turns`` operations; above it, ``turns`` per
# this many callers (16: 2x, 64: 8x), so a loop at 64 lasts about as many turns per
# caller as one at 16 and its p99 is not the start-up of a few callers.
CALLERS_PER_TURNS = 8


@dataclass(frozen=True)
class Plan:
    """How many operations each loop runs, at which levels, and the deployment's size."""

    turns: int  # operations of a loop one at a time (more in flight run more: count)
    runners: int
    slots: int
    # How the client runs a turn: "one-call" (SubmitAndWatch) or "two-calls"
    # (SubmitTurn, then WatchOperation).
    api: str = "one-call"
    # Issue 11: the public API over TLS and coordinator -> runner over mutual TLS
    # (certificates made for the run), instead of plaintext with a shared secret.
    tls: bool = False
    in_flight: tuple[int, ...] = IN_FLIGHT

    def count(self, in_flight: int) -> int:
        return self.turns * max(1, in_flight // CALLERS_PER_TURNS)

    def warmup(self, in_flight: int) -> int:
        return max(5, self.count(in_flight) // 10)


# --- CPU --------------------------------------------------------------------


def proc_cpu_table(*, reaped_children: bool = True) -> dict[int, tuple[int, float]]:
    """pid -> (ppid, CPU seconds: utime + stime of all its threads, plus, with
    ``reaped_children``, cutime + cstime of the children it has reaped). One scan
    of /proc (bench/replicas.py reads processes' own CPU with it too)."""
    ticks = os.sysconf("SC_CLK_TCK")
    last = 15 if reaped_children else 13
    table: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # exited while we looked
        fields = text.rsplit(")", 1)[1].split()
        # fields[1] ppid, [11] utime, [12] stime, [13] cutime, [14] cstime (proc(5))
        cpu = sum(int(f) for f in fields[11:last]) / ticks
        table[int(entry)] = (int(fields[1]), cpu)
    return table


def tree_cpu_seconds(roots: Mapping[str, int | None]) -> dict[str, float]:
    """CPU seconds so far of each named process and everything under it.

    A process's own time (all its threads), plus its children's: the live
    ones read directly, the exited ones through its cutime/cstime once it has
    reaped them (a PostgreSQL postmaster's backends). One scan of /proc for
    all roots; a root that is gone reads 0.0.
    """
    table = proc_cpu_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _cpu) in table.items():
        children.setdefault(ppid, []).append(pid)
    totals: dict[str, float] = {}
    for name, root in roots.items():
        total, stack, seen = 0.0, [root] if root in table else [], set()
        while stack:
            pid = stack.pop()
            if pid in seen or pid is None:
                continue
            seen.add(pid)
            total += table[pid][1]
            stack.extend(children.get(pid, []))
        totals[name] = total
    return totals


def run_within(
    argv: Sequence[str],
    timeout: float,
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    grace: float = STOP_GRACE,
) -> tuple[int, str, str] | None:
    """(exit code, stdout, stderr) of ``argv`` run to its end within ``timeout``; on
    overrun None, having sent it SIGTERM (a bench stops its own children by PID), after
    ``grace`` SIGKILL, and reaped it."""
    process = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate(timeout=grace)
        return None
    return process.returncode, stdout, stderr


# --- the scratch area -------------------------------------------------------


@dataclass
class Scratch:
    """The run's temp dir and every process started in it (ended by PID)."""

    root: Path
    processes: list[ManagedProcess]

    @property
    def runner_secret_file(self) -> Path:
        """The secret this run's runners demand of its coordinators (issue 11: plaintext
        on loopback with a shared secret), made on first use, mode 600."""
        path = self.root / "runner-secret"
        if not path.exists():
            write_secret_file(path)
        return path

    def open_runner_channel(self, address: str) -> Any:
        credentials = RunnerCredentials(secret=read_secret_file(self.runner_secret_file))
        return runner_sync_channel(credentials, address)

    @property
    def certs(self) -> Path:
        """A CA, a coordinator and MAX_RUNNERS runner certificates for TLS runs (made once)."""
        path = self.root / "certs"
        if not (path / "ca.pem").exists():
            runners = tuple(f"runner-{index}" for index in range(1, MAX_RUNNERS + 1))
            issue_deployment(path, coordinators=("coordinator",), runners=runners)
        return path

    def tls_flags(self, name: str) -> list[str]:
        certs = self.certs
        return [
            "--tls-cert", str(certs / f"{name}.pem"),
            "--tls-key", str(certs / f"{name}.key"),
            "--tls-ca", str(certs / "ca.pem"),
        ]  # fmt: skip

    def coordinator_tls(self) -> TlsMaterial:
        certs = self.certs
        return TlsMaterial.from_files(
            certs / "coordinator.pem", certs / "coordinator.key", certs / "ca.pem"
        )

    def open_tls_runner_channel(self, address: str) -> Any:
        return runner_sync_channel(RunnerCredentials(tls=self.coordinator_tls()), address)

    def open_tls_coordinator_channel(self, address: str) -> Any:
        trust = channel_credentials(self.coordinator_tls(), present_certificate=False)
        return grpc.secure_channel(address, trust)

    def start(
        self,
        name: str,
        argv: list[str],
        *,
        healthy: bool,
        open_channel: Callable[[str], Any] | None = None,
    ) -> ManagedProcess:
        # In this tree's root: ``python -m bench.baseline`` (and the services) import
        # this tree's code whatever directory the bench was started from.
        process = ManagedProcess(
            name,
            argv,
            self.root / "logs" / f"{name}.log",
            self.root / f"{name}.addr",
            cwd=REPO_ROOT,
        )
        self.processes.append(process)
        process.start(START_TIMEOUT)
        if healthy:
            process.wait_healthy(START_TIMEOUT, open_channel)
        return process

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            try:
                process.terminate(timeout=STOP_GRACE)
            except Exception as error:  # keep stopping the others
                print(f"stopping {process.name} (pid {process.pid}): {error}", file=sys.stderr)


@contextlib.contextmanager
def scratch(keep: bool) -> Iterator[Scratch]:
    root = Path(tempfile.mkdtemp(prefix="turnwire-bench-"))
    area = Scratch(root, [])
    failed = True
    try:
        yield area
        failed = False
    finally:
        area.stop_all()
        if keep or failed:
            print(f"bench files kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


# --- runners and the coordinator --------------------------------------------


def start_runners(area: Scratch, prefix: str, plan: Plan) -> list[ManagedProcess]:
    runners = []
    for index in range(1, plan.runners + 1):
        name = f"{prefix}-runner-{index}"
        (area.root / name).mkdir()
        argv = python_module(
            "runner_svc", "serve",
            "--listen", "127.0.0.1:0",
            "--store", str(area.root / name / "store.db"),
            "--executor", "echo",
            "--writable-slots", str(plan.slots),
            "--read-only-slots", str(plan.slots),
            *(
                area.tls_flags(f"runner-{index}")
                if plan.tls
                else ["--plaintext", "--coordinator-secret-file", str(area.runner_secret_file)]
            ),
            "--log-level", "WARNING",
        )  # fmt: skip
        health = area.open_tls_runner_channel if plan.tls else area.open_runner_channel
        runners.append(area.start(name, argv, healthy=True, open_channel=health))
    return runners


def write_tokens(area: Scratch, prefix: str) -> tuple[str, str]:
    """A tokens file (coordinator_svc.api.auth format) with one fresh token."""
    token = secrets.token_urlsafe(24)
    path = area.root / f"{prefix}-tokens"
    path.write_text(f"bench {hashlib.sha256(token.encode()).hexdigest()}\n")
    path.chmod(0o600)  # the coordinator refuses a tokens file others may read
    return str(path), token


@dataclass
class CoordinatorProcess:
    """bench/counting_coordinator.py as a process, and how to read its counters."""

    process: ManagedProcess
    counters_file: Path
    token: str
    last_seq: int = -1
    event_loop: str = "?"  # the loop it runs on, from its first snapshot

    @property
    def address(self) -> str:
        return self.process.address

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def _read(self) -> dict[str, Any] | None:
        try:
            snapshot: dict[str, Any] = json.loads(self.counters_file.read_text())
        except (OSError, ValueError):
            return None  # not written yet (the writer replaces the file atomically)
        return snapshot

    async def snapshot(self) -> dict[str, Any]:
        """Ask for a fresh snapshot (SIGUSR1) and wait (bounded) for it."""
        if self.pid is None or not self.process.alive():
            raise BenchBroke(f"the coordinator is not running:\n{self.process.log_tail()}")
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + SNAPSHOT_TIMEOUT
        while True:
            snapshot = self._read()
            if snapshot is not None and snapshot["seq"] > self.last_seq:
                self.last_seq = snapshot["seq"]
                return snapshot
            if time.monotonic() > deadline or not self.process.alive():
                raise BenchBroke(
                    f"no counters snapshot from the coordinator within {SNAPSHOT_TIMEOUT:.0f}s:\n"
                    + self.process.log_tail()
                )
            await asyncio.sleep(SNAPSHOT_POLL)


@dataclass(frozen=True)
class Counters:
    """What the coordinator process has counted so far (one snapshot, see
    CoordinatorProcess.snapshot)."""

    journal_commits: int
    dispatcher_commits: int
    rpc_calls: Mapping[str, int]
    journal_calls: Mapping[str, int]
    dispatcher_events: Mapping[str, int]  # the dispatcher's other integer metrics
    # The SQL journal's COMMITs (writes sharing one count once); 0 if not told.
    journal_transactions: int = 0

    @classmethod
    def from_snapshot(cls, snapshot: Mapping[str, Any]) -> Counters:
        dispatcher = snapshot["dispatcher"]
        return cls(
            journal_commits=int(snapshot["journal_commits"]),
            dispatcher_commits=int(dispatcher.get("commits", 0)),
            rpc_calls=dict(dispatcher.get("rpc_calls", {})),
            journal_calls=dict(snapshot["journal_calls"]),
            dispatcher_events={
                k: v for k, v in dispatcher.items() if isinstance(v, int) and k != "commits"
            },
            journal_transactions=int(snapshot.get("journal_transactions") or 0),
        )

    def minus(self, earlier: Counters) -> Counters:
        return Counters(
            self.journal_commits - earlier.journal_commits,
            self.dispatcher_commits - earlier.dispatcher_commits,
            _difference(self.rpc_calls, earlier.rpc_calls),
            _difference(self.journal_calls, earlier.journal_calls),
            _difference(self.dispatcher_events, earlier.dispatcher_events),
            self.journal_transactions - earlier.journal_transactions,
        )

    def counts(self) -> tuple[int, int, Mapping[str, int]]:
        """What must stop moving before a loop counts as finished (not the
        journal reads: the due scan reads every idle_poll seconds)."""
        return self.journal_commits, self.dispatcher_commits, self.rpc_calls


def _difference(later: Mapping[str, int], earlier: Mapping[str, int]) -> dict[str, int]:
    return {k: later.get(k, 0) - earlier.get(k, 0) for k in set(later) | set(earlier)}


def start_coordinator(
    area: Scratch,
    prefix: str,
    journal_url: str,
    runners: list[ManagedProcess],
    extra: Sequence[str] = (),
    *,
    tls: bool = False,
) -> CoordinatorProcess:
    """The real coordinator (with counters) in its own process, as ``serve`` runs it;
    ``extra`` are more ``serve`` flags (bench/coordinator_ab.py)."""
    tokens_file, token = write_tokens(area, prefix)
    counters_file = area.root / f"{prefix}-coordinator-counters.json"
    argv = [
        *python_module("bench.counting_coordinator"),
        "--counters-file", str(counters_file),
        "serve",
        "--listen", "127.0.0.1:0",
        "--journal-url", journal_url,
        "--tokens-file", tokens_file,
        "--migrate",
        *(
            area.tls_flags("coordinator")
            if tls
            else ["--plaintext", "--runner-secret-file", str(area.runner_secret_file)]
        ),
        "--log-level", "WARNING",
        *extra,
    ]  # fmt: skip
    for index, runner in enumerate(runners, 1):
        argv += ["--runner", f"runner-{index}={runner.address}"]
    health = area.open_tls_coordinator_channel if tls else None
    process = area.start(f"{prefix}-coordinator", argv, healthy=True, open_channel=health)
    coordinator = CoordinatorProcess(process, counters_file, token)
    first = coordinator._read()
    if first is not None:
        coordinator.last_seq = first["seq"]
        coordinator.event_loop = str(first.get("event_loop", "?"))
    return coordinator


QUIET_BUSY_CORES = 0.3  # the peer harness's default --quiet-threshold
QUIET_MAX_WAIT = 20.0
QUIET_SAMPLE = 1.0


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])
    return total - idle, total


async def wait_quiet(report: Callable[[str], None]) -> float:
    """Wait (at most QUIET_MAX_WAIT s) until the machine's busy CPU over a 1 s
    sample is at most QUIET_BUSY_CORES, as the peer harness does before each of
    its runs, so both sides start from a quiet machine; returns the last sample."""
    cores = os.cpu_count() or 1
    waited = 0.0
    busy_cores = 0.0
    while True:
        busy_before, total_before = _cpu_ticks()
        await asyncio.sleep(QUIET_SAMPLE)
        busy_after, total_after = _cpu_ticks()
        elapsed = max(total_after - total_before, 1)
        busy_cores = cores * (busy_after - busy_before) / elapsed
        waited += QUIET_SAMPLE
        if busy_cores <= QUIET_BUSY_CORES or waited >= QUIET_MAX_WAIT:
            break
    if waited > QUIET_SAMPLE:
        report(f"waited {waited:.0f} s for a quiet machine (busy {busy_cores:.2f} cores)")
    return busy_cores
