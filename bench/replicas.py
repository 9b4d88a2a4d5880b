"""Coordinator replicas on one PostgreSQL journal (issue 12): 1, 2, 3 replicas next to grpc echo.

    .venv/bin/python -m bench replicas [--replicas 1,2,3] [--turns N] [--concurrency N]
        [--runners N] [--rounds R] [--json PATH] [--out DIR] [--no-pg-commit-rate]

For each replica count it starts a fresh throwaway PostgreSQL cluster
(turnwire/testing/postgres.py) and a fresh deployment on it
(turnwire/testing/replicas.py ``ReplicaCluster``: N ``python -m coordinator_svc
serve --replica-id replica-i --lease-ttl T`` processes and M runners with
the no-op ``echo`` executor, every process its own), then, after a warm-up,
runs ``--rounds`` measured rounds. In each round this process (the client)
submits ``--turns`` no-op turns (model "builtin/echo") spread round robin
over the replicas, ``--concurrency`` at once, each one a SubmitAndWatch call
followed to its terminal state (the SDK's submit_and_wait), right after a
gRPC echo loop at the same concurrency against a ``python -m
bench.baseline --serve`` process (the denominator: "x echo").

Per round it measures turns/s, p50/p99 latency, and per turn:

- CPU ms of the client (this process, its loop only), of each coordinator
  and each runner (utime+stime from /proc/<pid>/stat, children excluded) and
  of PostgreSQL (the postmaster and every process whose parent it is: the
  backends and the server's own workers; the bench's own two monitoring
  backends left out), from the start of the loop until every turn is
  released (trailing Releases count); each replica's CPU also per turn it
  accepted, and every group as busy cores over the loop;
- PostgreSQL transactions (pg_stat_database.xact_commit of the journal's
  database: writes and reads), write transactions (the transaction ids the
  server handed out: each one a commit that flushes WAL), WAL flushes
  (pg_stat_wal.wal_sync: fewer than write transactions when commits share a
  flush) and WAL bytes (pg_current_wal_lsn). PostgreSQL publishes
  xact_commit and wal_sync up to 10 s late (a backend's counters wait until
  it has been idle or a second has passed), so each round waits
  ``--stats-wait`` seconds before reading them and subtracts the idle
  upkeep (due scans, lease renewals) measured over an idle window before
  the first round, and the bench's own polls.

The figures reported per replica count are each figure's median over the
rounds; every round is printed as it ends and kept in the JSON.
``--pg-commit-rate`` (on by default) also measures what this PostgreSQL
sustains for single-row commits (an UPDATE of one row, autocommit,
synchronous_commit on) from one connection and from ``--concurrency``
connections, on its own fresh cluster, and the script sets the turns' write
transactions against it ("on paper": turns/s at which the journal's commits
would run out).

It prints figures and never judges speed: exit 0 unless something broke
(a process did not start, a wait ran out) or a turn did not succeed (1).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psycopg

from bench.baseline import ECHO_METHOD, measure
from bench.e2e_processes import (
    STOP_GRACE,
    BenchBroke,
    Scratch,
    proc_cpu_table,
    wait_quiet,
)
from turnwire.client import AsyncTurnwireClient
from turnwire.client.failures import TurnwireError
from turnwire.launcher import LaunchError, ManagedProcess, python_module
from turnwire.testing.postgres import ClusterStartError, PostgresCluster, missing_binary
from turnwire.testing.replicas import OPEN, ReplicaCluster

PAYLOAD = b"x" * 256  # e2e.py's echo payload
RPC_TIMEOUT = 10.0  # one client call
TURN_TIMEOUT = 30.0  # one submit -> terminal
LOOP_TIMEOUT = 600.0  # one whole measured (or warm-up) loop
SETTLE_TIMEOUT = 30.0  # until every turn of a loop is released
SETTLE_POLL = 0.1
START_TIMEOUT = 60.0
# PostgreSQL 15's PGSTAT_IDLE_INTERVAL is 10 s: counters a backend holds are
# published by then even if it stays idle.
STATS_WAIT = 11.0
IDLE_SECONDS = 10.0
DEFAULT_REPLICAS = "1,2,3"
DEFAULT_TURNS = 600
DEFAULT_CONCURRENCY = 16
DEFAULT_ROUNDS = 3
DEFAULT_LEASE_TTL = 10.0  # the coordinator's own default
DEFAULT_SLOTS = 32
COMMIT_SECONDS = 5.0
COMMIT_WARMUP = 0.5
ECHO_MIN_CALLS = 200

GROUPS = ("client", "coordinators", "runners", "postgresql")


def progress(line: str) -> None:
    print(f"[replicas] {line}", file=sys.stderr, flush=True)


# --- CPU from /proc ------------------------------------------------------------


def _own_cpu_table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, own CPU seconds: utime + stime of all its threads, children excluded)."""
    return proc_cpu_table(reaped_children=False)


@dataclass(frozen=True)
class MachineTicks:
    """Jiffies of the whole machine so far, from /proc/stat's first line."""

    busy: int  # user + nice + system + irq + softirq (not idle, iowait or steal)
    irq: int  # irq + softirq: e.g. loopback TCP, in no process's utime/stime
    steal: int  # the hypervisor ran someone else
    total: int

    @classmethod
    def read(cls) -> MachineTicks:
        with open("/proc/stat", encoding="ascii") as stat:
            values = [int(v) for v in stat.readline().split()[1:]]
        values += [0] * (8 - len(values))
        user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
        busy = user + nice + system + irq + softirq
        return cls(busy, irq + softirq, steal, sum(values[:8]))

    def cores_since(self, earlier: MachineTicks) -> dict[str, float]:
        """Cores busy between the two readings: in all, in irq, stolen."""
        scale = (os.cpu_count() or 1) / max(self.total - earlier.total, 1)
        return {
            "machine": (self.busy - earlier.busy) * scale,
            "irq": (self.irq - earlier.irq) * scale,
            "steal": (self.steal - earlier.steal) * scale,
        }


# --- PostgreSQL: what the server says ------------------------------------------


@dataclass(frozen=True)
class ServerCounters:
    """Exact at once: transaction ids handed out, WAL position."""

    next_xid: int
    wal_bytes: int


@dataclass(frozen=True)
class LaggedCounters:
    """Published up to PGSTAT_IDLE_INTERVAL late: read after a wait."""

    at: float
    xact_commit: int
    wal_sync: int


class Probe:
    """Two long-lived connections to the throwaway cluster, left out of its CPU:
    one to the ``postgres`` database (counters; its reads do not count in the
    journal database's xact_commit), one to the journal's database (is every
    turn released?), whose polls are counted and subtracted."""

    def __init__(self, cluster: PostgresCluster, database: str) -> None:
        self.cluster = cluster
        self.database = database
        self.stats = psycopg.connect(cluster.dsn("postgres"), autocommit=True, connect_timeout=5)
        self.journal = psycopg.connect(cluster.dsn(database), autocommit=True, connect_timeout=5)
        self.own_backends = {self._scalar(self.stats, "SELECT pg_backend_pid()")}
        self.own_backends.add(self._scalar(self.journal, "SELECT pg_backend_pid()"))
        self.journal_polls = 0  # transactions the bench made in the journal database

    @staticmethod
    def _scalar(connection: psycopg.Connection[Any], sql: str) -> int:
        row = connection.execute(sql.encode()).fetchone()
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        self.stats.close()
        self.journal.close()

    def version(self) -> str:
        row = self.stats.execute(b"SHOW server_version").fetchone()
        return str(row[0]) if row else "?"

    def exact(self) -> ServerCounters:
        row = self.stats.execute(
            b"SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,"
            b" pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
        ).fetchone()
        assert row is not None
        return ServerCounters(int(row[0]), int(row[1]))

    def lagged(self) -> LaggedCounters:
        row = self.stats.execute(
            b"SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = %s),"
            b" (SELECT wal_sync FROM pg_stat_wal)",
            (self.database,),
        ).fetchone()
        assert row is not None
        return LaggedCounters(time.monotonic(), int(row[0] or 0), int(row[1] or 0))

    def open_operations(self) -> int:
        self.journal_polls += 1
        row = self.journal.execute(
            f"SELECT count(*) FROM operations WHERE {OPEN}".encode()
        ).fetchone()
        assert row is not None
        return int(row[0])

    def wait_released(self, within: float) -> None:
        """Until no operation is open (every turn terminal and released)."""
        deadline = time.monotonic() + within
        while (left := self.open_operations()) > 0:
            if time.monotonic() > deadline:
                raise BenchBroke(f"{left} operation(s) still open {within:.0f}s after a loop")
            time.sleep(SETTLE_POLL)

    def postgres_cpu(self, table: Mapping[int, tuple[int, float]]) -> dict[int, float]:
        """pid -> own CPU of the postmaster and its children, without the bench's backends."""
        postmaster = self.cluster.postmaster_pid()
        if postmaster is None:
            raise BenchBroke("the PostgreSQL cluster has no postmaster")
        found = {
            pid: cpu
            for pid, (ppid, cpu) in table.items()
            if (pid == postmaster or ppid == postmaster) and pid not in self.own_backends
        }
        if postmaster not in found:
            raise BenchBroke(f"the postmaster (pid {postmaster}) is gone")
        return found


@contextlib.contextmanager
def postgres_cluster() -> Iterator[tuple[PostgresCluster, str]]:
    """A started throwaway cluster and a new database in it; stopped after."""
    cluster = PostgresCluster()
    try:
        try:
            cluster.start()
        except (ClusterStartError, OSError) as error:
            raise BenchBroke(f"the PostgreSQL cluster did not start: {error}") from error
        yield cluster, cluster.create_database()
    finally:
        cluster.stop()  # pg_ctl stop, then SIGKILL to the postmaster PID if it lingers


# --- the deployment ------------------------------------------------------------


@dataclass
class BenchCluster(ReplicaCluster):
    """ReplicaCluster with its runners logging warnings only (e2e.py's runners do
    too: at INFO a runner writes a line per turn)."""

    def _runner_process(
        self, name: str, store: Path, listen: str, env: Mapping[str, str] | None = None
    ) -> ManagedProcess:
        process = super()._runner_process(name, store, listen, env)
        process.argv = [*process.argv, "--log-level", "WARNING"]
        return process


@dataclass(frozen=True)
class Settings:
    turns: int
    concurrency: int
    runners: int
    rounds: int
    warmup: int
    lease_ttl: float
    slots: int
    stats_wait: float
    idle_seconds: float


def start_deployment(
    data_dir: Path, journal_url: str, replicas: int, settings: Settings
) -> BenchCluster:
    deployment = BenchCluster(
        data_dir,
        runner_count=settings.runners,
        executor="echo",
        writable_slots=settings.slots,
        read_only_slots=settings.slots,
        journal_url=journal_url,
        coordinator_args=("--log-level", "WARNING"),
        replica_count=replicas,
        lease_ttl=settings.lease_ttl,
    )
    try:
        deployment.start(START_TIMEOUT)
    except BaseException:
        deployment.stop()
        raise
    return deployment


def named_pids(deployment: BenchCluster) -> dict[str, int]:
    named: dict[str, int] = {}
    for name in deployment.names:
        pid = deployment.replicas[name].pid
        assert pid is not None
        named[name] = pid
    for slot in deployment.runners:
        assert slot.process.pid is not None
        named[slot.name] = slot.process.pid
    return named


# --- one snapshot, and the figures between two ---------------------------------


@dataclass(frozen=True)
class Snapshot:
    at: float
    processes: dict[str, float]  # replica / runner name -> own CPU seconds
    postgres: dict[int, float]  # pid -> own CPU seconds
    machine: MachineTicks
    server: ServerCounters


def snapshot(probe: Probe, pids: Mapping[str, int]) -> Snapshot:
    table = _own_cpu_table()
    missing = [name for name, pid in pids.items() if pid not in table]
    if missing:
        raise BenchBroke(f"process(es) gone: {', '.join(missing)}")
    return Snapshot(
        at=time.monotonic(),
        processes={name: table[pid][1] for name, pid in pids.items()},
        postgres=probe.postgres_cpu(table),
        machine=MachineTicks.read(),
        server=probe.exact(),
    )


def postgres_seconds(before: Snapshot, after: Snapshot) -> float:
    """CPU the server's processes spent between the two (a backend that started
    in between counts whole; one that ended in between is lost, which the
    coordinators' long-lived pools make rare)."""
    return sum(cpu - before.postgres.get(pid, 0.0) for pid, cpu in after.postgres.items())


@dataclass(frozen=True)
class Idle:
    """What the deployment costs with no turns: per second, over an idle window."""

    seconds: float
    cores: dict[str, float]  # process name, "postgresql" -> CPU seconds per second
    xacts_per_second: float
    write_xacts_per_second: float
    wal_flushes_per_second: float
    wal_bytes_per_second: float

    def as_json(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 2),
            "cores": {k: round(v, 4) for k, v in self.cores.items()},
            "xacts_per_second": round(self.xacts_per_second, 2),
            "write_xacts_per_second": round(self.write_xacts_per_second, 2),
            "wal_flushes_per_second": round(self.wal_flushes_per_second, 2),
            "wal_bytes_per_second": round(self.wal_bytes_per_second, 1),
        }


async def measure_idle(probe: Probe, pids: Mapping[str, int], seconds: float) -> Idle:
    first, first_lagged = snapshot(probe, pids), probe.lagged()
    await asyncio.sleep(seconds)
    last, last_lagged = snapshot(probe, pids), probe.lagged()
    span = max(last.at - first.at, 1e-9)
    lagged_span = max(last_lagged.at - first_lagged.at, 1e-9)
    cores = {n: (last.processes[n] - first.processes[n]) / span for n in pids}
    cores["postgresql"] = postgres_seconds(first, last) / span
    return Idle(
        seconds=span,
        cores=cores,
        xacts_per_second=(last_lagged.xact_commit - first_lagged.xact_commit) / lagged_span,
        write_xacts_per_second=(last.server.next_xid - first.server.next_xid) / span,
        wal_flushes_per_second=(last_lagged.wal_sync - first_lagged.wal_sync) / lagged_span,
        wal_bytes_per_second=(last.server.wal_bytes - first.server.wal_bytes) / span,
    )


@dataclass(frozen=True)
class Round:
    """One measured round: ``figures`` are flat name -> value (medians are per name)."""

    replicas: int
    number: int
    submitted: int
    states: dict[str, int]
    figures: dict[str, float]

    @property
    def completed(self) -> int:
        return sum(n for state, n in self.states.items() if not state.startswith("error"))

    @property
    def succeeded(self) -> int:
        return self.states.get("SUCCEEDED", 0)

    def as_json(self) -> dict[str, Any]:
        return {
            "round": self.number,
            "submitted": self.submitted,
            "completed": self.completed,
            "succeeded": self.succeeded,
            "states": dict(sorted(self.states.items())),
            **_nest(self.figures),
        }


def round_figures(
    *,
    names: Sequence[str],
    runners: Sequence[str],
    turns: int,
    seconds: float,
    latencies: Sequence[float],
    echo_ops: float,
    client_cpu: float,
    before: Snapshot,
    after: Snapshot,
    lagged_before: LaggedCounters,
    lagged_after: LaggedCounters,
    polls: int,
    idle: Idle,
) -> dict[str, float]:
    """Every figure of one round, flat ("cpu_ms_per_turn.replica-1", ...)."""
    ordered = sorted(latencies)

    def percentile(fraction: float) -> float:
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))] * 1000

    window = max(after.at - before.at, 1e-9)
    per_turn = 1000.0 / turns  # seconds -> ms per turn
    spent = {n: after.processes[n] - before.processes[n] for n in (*names, *runners)}
    groups = {
        "client": client_cpu,
        "coordinators": sum(spent[n] for n in names),
        "runners": sum(spent[n] for n in runners),
        "postgresql": postgres_seconds(before, after),
    }
    figures: dict[str, float] = {
        "turns_per_second": turns / seconds,
        "echo_ops_per_second": echo_ops,
        "x_echo": (turns / seconds) / echo_ops if echo_ops else 0.0,
        "p50_ms": percentile(0.50),
        "p99_ms": percentile(0.99),
        "mean_ms": statistics.fmean(latencies) * 1000 if latencies else 0.0,
        "loop_seconds": seconds,
        "window_seconds": window,
    }
    for name, value in spent.items():
        figures[f"cpu_ms_per_turn.{name}"] = value * per_turn
    for name, value in groups.items():
        figures[f"cpu_ms_per_turn.{name}"] = value * per_turn
    figures["cpu_ms_per_turn.total"] = sum(groups.values()) * per_turn
    own_turns = turns / len(names)  # round robin: each replica accepted as many
    for name in names:
        figures[f"cpu_ms_per_accepted_turn.{name}"] = spent[name] * 1000 / own_turns
    # Busy cores over the loop and its trailing Releases (the client: its loop only).
    figures["busy_cores.client"] = client_cpu / seconds
    for name in ("coordinators", "runners", "postgresql"):
        figures[f"busy_cores.{name}"] = groups[name] / window
    figures["busy_cores.accounted"] = sum(figures[f"busy_cores.{n}"] for n in GROUPS)
    for name, cores in after.machine.cores_since(before.machine).items():
        figures[f"busy_cores.{name}"] = cores
    # Whatever else ran on the machine (another user's job skews every figure).
    figures["busy_cores.other"] = max(
        figures["busy_cores.machine"] - figures["busy_cores.accounted"] - figures["busy_cores.irq"],
        0.0,
    )
    # The journal, per turn.
    tail = max(lagged_after.at - after.at, 0.0)  # idle seconds read after the window
    xacts = (
        lagged_after.xact_commit
        - lagged_before.xact_commit
        - polls
        - (idle.xacts_per_second * tail)
    )
    flushes = lagged_after.wal_sync - lagged_before.wal_sync - idle.wal_flushes_per_second * tail
    figures["xacts_per_turn"] = max(xacts, 0.0) / turns
    figures["write_xacts_per_turn"] = (after.server.next_xid - before.server.next_xid) / turns
    figures["wal_flushes_per_turn"] = max(flushes, 0.0) / turns
    figures["wal_bytes_per_turn"] = (after.server.wal_bytes - before.server.wal_bytes) / turns
    figures["write_xacts_per_second"] = figures["write_xacts_per_turn"] * turns / window
    return figures


def _nest(flat: Mapping[str, float]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        head, _, rest = key.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = round(value, 4)
        else:
            nested[head] = round(value, 4)
    return nested


def medians(rounds: Sequence[Round]) -> dict[str, float]:
    keys = rounds[0].figures.keys()
    return {k: statistics.median(r.figures[k] for r in rounds) for k in keys}


# --- the loops -------------------------------------------------------------------


async def echo_loop(address: str, calls: int, concurrency: int) -> float:
    """grpc echo at the same concurrency, a few calls of warm-up first: ops/s."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary(ECHO_METHOD)

        async def once(index: int) -> None:
            del index
            await call(PAYLOAD, timeout=RPC_TIMEOUT)

        await measure("echo warm-up", once, max(20, calls // 10), concurrency)
        return (await measure("grpc echo", once, calls, concurrency)).ops_per_second


async def turn_loop(
    clients: Sequence[AsyncTurnwireClient], count: int, concurrency: int
) -> tuple[float, list[float], collections.Counter[str]]:
    """``count`` no-op turns, turn i to replica i mod N, ``concurrency`` at once:
    (seconds, latencies, final states)."""
    states: collections.Counter[str] = collections.Counter()

    async def turn(index: int) -> None:
        client = clients[index % len(clients)]
        try:
            done = await client.submit_and_wait(
                items=["bench"], model="builtin/echo", timeout=TURN_TIMEOUT
            )
        except TurnwireError as error:
            states[f"error: {type(error).__name__}"] += 1
            return
        states[done.state.value] += 1

    figures = await measure("turns", turn, count, concurrency)
    return figures.seconds, list(figures.latencies), states


# --- one replica count -----------------------------------------------------------


@dataclass
class CountResult:
    replicas: int
    postgres_version: str
    idle: Idle
    rounds: list[Round] = field(default_factory=list)

    @property
    def median(self) -> dict[str, float]:
        return medians(self.rounds)

    def as_json(self) -> dict[str, Any]:
        return {
            "replicas": self.replicas,
            "postgres_version": self.postgres_version,
            "idle": self.idle.as_json(),
            "median": _nest(self.median),
            "rounds": [r.as_json() for r in self.rounds],
        }


async def measure_count(
    replicas: int, deployment: BenchCluster, probe: Probe, echo_address: str, settings: Settings
) -> CountResult:
    names = deployment.names
    runners = [slot.name for slot in deployment.runners]
    pids = named_pids(deployment)
    clients = [
        AsyncTurnwireClient(
            deployment.address_of(name), deployment.token, timeout=RPC_TIMEOUT, retries=0
        )
        for name in names
    ]
    try:
        async with asyncio.timeout(LOOP_TIMEOUT):
            await turn_loop(clients, settings.warmup, settings.concurrency)
        probe.wait_released(SETTLE_TIMEOUT)
        progress(
            f"{replicas} replica(s): warmed up ({settings.warmup} turns); waiting "
            f"{settings.stats_wait:.0f} s for PostgreSQL's counters, then "
            f"{settings.idle_seconds:.0f} s idle"
        )
        await asyncio.sleep(settings.stats_wait)
        idle = await measure_idle(probe, pids, settings.idle_seconds)
        progress(
            f"{replicas} replica(s) idle: {idle.xacts_per_second:.1f} xacts/s, "
            f"{idle.write_xacts_per_second:.1f} write xacts/s, coordinators "
            f"{sum(idle.cores[n] for n in names) * 100:.1f}% of a core, postgresql "
            f"{idle.cores['postgresql'] * 100:.1f}%"
        )
        result = CountResult(replicas, probe.version(), idle)
        for number in range(1, settings.rounds + 1):
            echo_ops = await echo_loop(
                echo_address, max(ECHO_MIN_CALLS, settings.turns), settings.concurrency
            )
            lagged_before, polls_before = probe.lagged(), probe.journal_polls
            before = snapshot(probe, pids)
            client_before = time.process_time()
            async with asyncio.timeout(LOOP_TIMEOUT):
                seconds, latencies, states = await turn_loop(
                    clients, settings.turns, settings.concurrency
                )
            client_cpu = time.process_time() - client_before
            probe.wait_released(SETTLE_TIMEOUT)
            after = snapshot(probe, pids)
            polls = probe.journal_polls - polls_before
            await asyncio.sleep(settings.stats_wait)
            lagged_after = probe.lagged()
            figures = round_figures(
                names=names, runners=runners, turns=settings.turns, seconds=seconds,
                latencies=latencies, echo_ops=echo_ops, client_cpu=client_cpu,
                before=before, after=after, lagged_before=lagged_before,
                lagged_after=lagged_after, polls=polls, idle=idle,
            )  # fmt: skip
            done = Round(replicas, number, settings.turns, dict(states), figures)
            result.rounds.append(done)
            progress(
                f"{replicas} replica(s) round {number}/{settings.rounds}: "
                f"{figures['turns_per_second']:.1f} turns/s ({figures['x_echo']:.3f}x echo "
                f"{echo_ops:.0f}/s), p50 {figures['p50_ms']:.1f} ms, p99 "
                f"{figures['p99_ms']:.1f} ms, CPU ms/turn: coordinators "
                f"{figures['cpu_ms_per_turn.coordinators']:.2f}, runners "
                f"{figures['cpu_ms_per_turn.runners']:.2f}, postgresql "
                f"{figures['cpu_ms_per_turn.postgresql']:.2f}, client "
                f"{figures['cpu_ms_per_turn.client']:.2f}; machine busy "
                f"{figures['busy_cores.machine']:.2f} cores (irq {figures['busy_cores.irq']:.2f}, "
                f"others {figures['busy_cores.other']:.2f}, stolen "
                f"{figures['busy_cores.steal']:.2f}); write xacts/turn "
                f"{figures['write_xacts_per_turn']:.2f}; {done.succeeded}/{done.submitted} "
                "succeeded"
            )
        return result
    finally:
        for client in clients:
            await client.close()


def run_count(replicas: int, root: Path, echo_address: str, settings: Settings) -> CountResult:
    with postgres_cluster() as (cluster, database):
        progress(
            f"{replicas} replica(s): PostgreSQL up (postmaster pid {cluster.postmaster_pid()}, "
            f"port {cluster.port})"
        )
        deployment = start_deployment(
            root / f"replicas-{replicas}", cluster.url(database), replicas, settings
        )
        probe: Probe | None = None
        try:
            pids = named_pids(deployment)
            progress(
                f"{replicas} replica(s): "
                + ", ".join(f"{n} pid {p}" for n, p in pids.items())
                + f" (lease TTL {settings.lease_ttl:g} s)"
            )
            probe = Probe(cluster, database)
            return asyncio.run(measure_count(replicas, deployment, probe, echo_address, settings))
        finally:
            if probe is not None:
                probe.close()
            deployment.stop()


# --- what this PostgreSQL sustains ------------------------------------------------


@dataclass(frozen=True)
class CommitRate:
    connections: int
    commits: int
    seconds: float
    server_cpu_ms: float  # per commit
    client_cpu_ms: float  # per commit (this process, all its threads)
    wal_flushes_per_commit: float
    busy_cores: float

    @property
    def per_second(self) -> float:
        return self.commits / self.seconds if self.seconds else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "connections": self.connections,
            "commits": self.commits,
            "seconds": round(self.seconds, 3),
            "commits_per_second": round(self.per_second, 1),
            "server_cpu_ms_per_commit": round(self.server_cpu_ms, 4),
            "client_cpu_ms_per_commit": round(self.client_cpu_ms, 4),
            "wal_flushes_per_commit": round(self.wal_flushes_per_commit, 4),
            "machine_busy_cores": round(self.busy_cores, 3),
        }


def commit_rate(
    cluster: PostgresCluster, probe: Probe, connections: int, seconds: float, stats_wait: float
) -> CommitRate:
    """Single-row UPDATE commits (autocommit, synchronous_commit on) from
    ``connections`` threads, one connection and one row each, for ``seconds``."""
    dsn = cluster.dsn(probe.database)
    counts = [0] * connections
    stop = threading.Event()
    ready = threading.Barrier(connections + 1)
    failures: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as connection:
                connection.execute(b"SET synchronous_commit = on")
                ready.wait(START_TIMEOUT)
                while not stop.is_set():
                    connection.execute(
                        b"UPDATE commit_rate SET n = n + 1 WHERE id = %s", (index,), prepare=True
                    )
                    counts[index] += 1
        except BaseException as error:  # reported by the caller
            failures.append(error)
            with contextlib.suppress(threading.BrokenBarrierError):
                ready.abort()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(connections)]
    for thread in threads:
        thread.start()
    try:
        ready.wait(START_TIMEOUT)
        time.sleep(COMMIT_WARMUP)
        lagged_before = probe.lagged()
        table = _own_cpu_table()
        server_before = probe.postgres_cpu(table)
        machine_before, client_before = MachineTicks.read(), time.process_time()
        counted_before, started = sum(counts), time.perf_counter()
        time.sleep(seconds)
        counted, elapsed = sum(counts) - counted_before, time.perf_counter() - started
        client = time.process_time() - client_before
        server_after = probe.postgres_cpu(_own_cpu_table())
        machine_after = MachineTicks.read()
    finally:
        stop.set()
        for thread in threads:
            thread.join(STOP_GRACE)
    if failures:
        raise BenchBroke(f"the commit loop failed: {failures[0]!r}")
    time.sleep(stats_wait)
    lagged_after = probe.lagged()
    server = sum(cpu - server_before.get(pid, 0.0) for pid, cpu in server_after.items())
    xacts = lagged_after.xact_commit - lagged_before.xact_commit
    cores = machine_after.cores_since(machine_before)["machine"]
    return CommitRate(
        connections=connections,
        commits=counted,
        seconds=elapsed,
        server_cpu_ms=server * 1000 / max(counted, 1),
        client_cpu_ms=client * 1000 / max(counted, 1),
        wal_flushes_per_commit=(lagged_after.wal_sync - lagged_before.wal_sync) / max(xacts, 1),
        busy_cores=cores,
    )


def measure_commit_rates(
    levels: Sequence[int], seconds: float, stats_wait: float
) -> list[CommitRate]:
    with postgres_cluster() as (cluster, database):
        probe = Probe(cluster, database)
        try:
            with psycopg.connect(cluster.dsn(database), autocommit=True) as setup:
                setup.execute(b"CREATE TABLE commit_rate (id integer PRIMARY KEY, n bigint)")
                setup.execute(
                    b"INSERT INTO commit_rate SELECT g, 0 FROM generate_series(0, %s) g",
                    (max(levels),),
                )
            rates = []
            for connections in levels:
                rate = commit_rate(cluster, probe, connections, seconds, stats_wait)
                rates.append(rate)
                progress(
                    f"single-row commits, {connections} connection(s): "
                    f"{rate.per_second:.0f}/s, server CPU {rate.server_cpu_ms:.3f} ms, "
                    f"client CPU {rate.client_cpu_ms:.3f} ms, WAL flushes/commit "
                    f"{rate.wal_flushes_per_commit:.2f}, machine busy {rate.busy_cores:.2f} cores"
                )
            return rates
        finally:
            probe.close()


# --- the report ------------------------------------------------------------------


@dataclass
class Report:
    settings: Settings
    counts: list[CountResult]
    commit_rates: list[CommitRate]
    cpus: int
    load_before: float
    load_after: float = 0.0

    @property
    def all_succeeded(self) -> bool:
        return all(r.succeeded == r.submitted for c in self.counts for r in c.rounds)

    def ceilings(self, count: CountResult) -> dict[str, float]:
        """Turns/s at which each resource would run out, from this count's per-turn
        figures (each part given whole cores of its own; linear, so on paper)."""
        m = count.median
        names = [f"replica-{i}" for i in range(1, count.replicas + 1)]
        own = statistics.median(m[f"cpu_ms_per_accepted_turn.{n}"] for n in names)
        found = {
            "machine": self.cpus * 1000 / m["cpu_ms_per_turn.total"],
            "coordinator_core": 1000 / own,
            # Each runner serves 1/M of the turns at M times its share of the CPU.
            "runner_core": 1000 / m["cpu_ms_per_turn.runners"],
            "postgresql_core": 1000 / m["cpu_ms_per_turn.postgresql"],
            "client_core": 1000 / m["cpu_ms_per_turn.client"],
        }
        for rate in self.commit_rates:
            if m["write_xacts_per_turn"] > 0:
                found[f"pg_commits_{rate.connections}"] = (
                    rate.per_second / m["write_xacts_per_turn"]
                )
        return found

    def ceiling_label(self, key: str) -> str:
        if key.startswith("pg_commits_"):
            connections = key.rsplit("_", 1)[1]
            return f"journal commits ({connections} conn.)"
        return {
            "machine": f"all {self.cpus} cores here",
            "coordinator_core": "a core per coordinator",
            "runner_core": "a core per runner",
            "postgresql_core": "one PostgreSQL core",
            "client_core": "one client core",
        }[key]

    def as_json(self) -> dict[str, Any]:
        return {
            "cpus": self.cpus,
            "load_before": round(self.load_before, 2),
            "load_after": round(self.load_after, 2),
            "settings": {
                "turns": self.settings.turns,
                "concurrency": self.settings.concurrency,
                "runners": self.settings.runners,
                "rounds": self.settings.rounds,
                "warmup_turns": self.settings.warmup,
                "lease_ttl": self.settings.lease_ttl,
                "slots": self.settings.slots,
                "stats_wait": self.settings.stats_wait,
                "idle_seconds": self.settings.idle_seconds,
            },
            "counts": [
                {**c.as_json(), "ceilings": {k: round(v, 1) for k, v in self.ceilings(c).items()}}
                for c in self.counts
            ],
            "pg_commit_rate": [r.as_json() for r in self.commit_rates],
            "paragraph": self.paragraph(),
            "all_succeeded": self.all_succeeded,
        }

    def lines(self) -> list[str]:
        s = self.settings
        out = [
            f"Coordinator replicas on one PostgreSQL journal: {s.turns} no-op turns a round, "
            f"{s.concurrency} in flight, round robin over the replicas, {s.runners} runner(s); "
            f"median of {s.rounds} round(s); {self.cpus} cores, load {self.load_before:.2f} "
            f"before, {self.load_after:.2f} after",
            "",
            "| replicas | turns/s | x echo | vs 1 | p50 ms | p99 ms | echo ops/s "
            "| busy cores: machine | client | coordinators | runners | postgresql | irq "
            "| other | stolen |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
            "| ---: | ---: | ---: |",
        ]
        first = self.counts[0].median["turns_per_second"] if self.counts else 0.0
        for c in self.counts:
            m = c.median
            out.append(
                f"| {c.replicas} | {m['turns_per_second']:.1f} | {m['x_echo']:.3f} | "
                f"{m['turns_per_second'] / first if first else 0:.2f} | {m['p50_ms']:.1f} | "
                f"{m['p99_ms']:.1f} | {m['echo_ops_per_second']:.0f} | "
                f"{m['busy_cores.machine']:.2f} | {m['busy_cores.client']:.2f} | "
                f"{m['busy_cores.coordinators']:.2f} | {m['busy_cores.runners']:.2f} | "
                f"{m['busy_cores.postgresql']:.2f} | {m['busy_cores.irq']:.2f} | "
                f"{m['busy_cores.other']:.2f} | {m['busy_cores.steal']:.2f} |"
            )
        out += [
            "",
            "CPU ms per turn (each replica also per turn it accepted):",
            "",
            "| replicas | client | coordinators | each replica, per accepted turn | runners "
            "| postgresql | total |",
            "| ---: | ---: | ---: | --- | ---: | ---: | ---: |",
        ]
        for c in self.counts:
            m = c.median
            each = " / ".join(
                f"{m[f'cpu_ms_per_accepted_turn.replica-{i}']:.2f}"
                for i in range(1, c.replicas + 1)
            )
            out.append(
                f"| {c.replicas} | {m['cpu_ms_per_turn.client']:.2f} | "
                f"{m['cpu_ms_per_turn.coordinators']:.2f} | {each} | "
                f"{m['cpu_ms_per_turn.runners']:.2f} | {m['cpu_ms_per_turn.postgresql']:.2f} | "
                f"{m['cpu_ms_per_turn.total']:.2f} |"
            )
        out += [
            "",
            "The journal per turn (PostgreSQL's own counters), and idle upkeep:",
            "",
            "| replicas | xacts | write xacts | WAL flushes | WAL KiB | write xacts/s "
            "| idle: xacts/s | idle: coordinators % core |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for c in self.counts:
            m = c.median
            idle_coord = sum(c.idle.cores[f"replica-{i}"] for i in range(1, c.replicas + 1))
            out.append(
                f"| {c.replicas} | {m['xacts_per_turn']:.2f} | {m['write_xacts_per_turn']:.2f} | "
                f"{m['wal_flushes_per_turn']:.2f} | {m['wal_bytes_per_turn'] / 1024:.2f} | "
                f"{m['write_xacts_per_second']:.0f} | {c.idle.xacts_per_second:.1f} | "
                f"{idle_coord * 100:.1f} |"
            )
        out += [
            "",
            "Each figure is its own median over the rounds (x echo: the median of each round's "
            "ratio to the echo measured just before it).",
            "",
            "Every round's turns/s (x echo):",
        ]
        for c in self.counts:
            out.append(
                f"  {c.replicas} replica(s): "
                + ", ".join(
                    f"{r.figures['turns_per_second']:.1f} ({r.figures['x_echo']:.3f}x)"
                    for r in c.rounds
                )
            )
        if self.commit_rates:
            out += [
                "",
                "What this PostgreSQL sustains: single-row UPDATE commits, synchronous_commit on:",
            ]
            for rate in self.commit_rates:
                out.append(
                    f"  {rate.connections:>3} connection(s): {rate.per_second:8.0f} commits/s, "
                    f"server CPU {rate.server_cpu_ms:.3f} ms/commit, client CPU "
                    f"{rate.client_cpu_ms:.3f} ms/commit, {rate.wal_flushes_per_commit:.2f} WAL "
                    f"flushes/commit, machine busy {rate.busy_cores:.2f} cores"
                )
        out += ["", "On paper, turns/s at which each part runs out (linear in its CPU per turn):"]
        for c in self.counts:
            ceilings = self.ceilings(c)
            out.append(
                f"  {c.replicas} replica(s): "
                + ", ".join(f"{self.ceiling_label(k)} {v:.0f}" for k, v in ceilings.items())
            )
        out += ["", self.paragraph()]
        return out

    def paragraph(self) -> str:
        if not self.counts:
            return ""
        s = self.settings
        first = self.counts[0]
        m1 = first.median
        parts = [
            f"On this {self.cpus}-core machine, {s.turns} no-op turns a round at "
            f"{s.concurrency} in flight, spread round robin over the replicas "
            f"(median of {s.rounds} rounds, one PostgreSQL journal, {s.runners} runner(s)):"
        ]
        for c in self.counts:
            m = c.median
            parts.append(
                f"{c.replicas} replica(s) ran {m['turns_per_second']:.0f} turns/s "
                f"({m['x_echo']:.3f}x the gRPC echo measured beside it, "
                f"{m['turns_per_second'] / m1['turns_per_second']:.2f}x one replica), "
                f"p50 {m['p50_ms']:.0f} ms, with the machine {m['busy_cores.machine']:.2f} of "
                f"{self.cpus} cores busy;"
            )
        last_count = self.counts[-1]
        last = last_count.median
        parts.append(
            f"at {last_count.replicas} replica(s), per turn the coordinators spent "
            f"{last['cpu_ms_per_turn.coordinators']:.2f} ms of CPU in all, the runners "
            f"{last['cpu_ms_per_turn.runners']:.2f}, PostgreSQL "
            f"{last['cpu_ms_per_turn.postgresql']:.2f} and the client "
            f"{last['cpu_ms_per_turn.client']:.2f} ({last['cpu_ms_per_turn.total']:.2f} ms), "
            f"and the journal took {last['write_xacts_per_turn']:.2f} write transactions "
            f"({last['xacts_per_turn']:.2f} with reads) and {last['wal_flushes_per_turn']:.2f} "
            "WAL flushes."
        )
        if self.commit_rates:
            best = max(self.commit_rates, key=lambda r: r.per_second)
            parts.append(
                f"The same PostgreSQL commits {best.per_second:.0f} single-row transactions a "
                f"second from {best.connections} connection(s), enough for "
                f"{best.per_second / max(last['write_xacts_per_turn'], 1e-9):.0f} turns/s at "
                f"{last['write_xacts_per_turn']:.2f} a turn."
            )
        ceilings = self.ceilings(last_count)
        parts.append(
            f"On paper (each part's CPU per turn, linear), a core per coordinator drives "
            f"{ceilings['coordinator_core']:.0f} turns/s, a core per runner "
            f"{ceilings['runner_core']:.0f} and one PostgreSQL core "
            f"{ceilings['postgresql_core']:.0f}."
        )
        return " ".join(parts)


def print_report(report: Report) -> None:
    print("\n".join(report.lines()))


# --- the run ---------------------------------------------------------------------


def parse_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from error
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("replica counts must be integers >= 1, e.g. 1,2,3")
    return counts


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n", 1)[0].strip(),
        epilog="What it measures, and how: see the top of bench/replicas.py. "
        "It never judges speed.",
    )
    parser.add_argument(
        "--replicas",
        type=parse_counts,
        default=parse_counts(DEFAULT_REPLICAS),
        metavar="N,N,...",
        help=f"replica counts to measure, each on a fresh PostgreSQL cluster and "
        f"deployment (default {DEFAULT_REPLICAS})",
    )
    parser.add_argument(
        "--turns",
        type=int,
        default=DEFAULT_TURNS,
        help=f"turns per measured round (default {DEFAULT_TURNS})",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help="turns in flight, over all replicas; also the echo loop's and the "
        f"commit loop's connections (default {DEFAULT_CONCURRENCY})",
    )
    parser.add_argument(
        "--runners",
        type=int,
        default=1,
        help="runner processes, shared by every replica (default 1)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        help=f"measured rounds per replica count; figures are medians (default {DEFAULT_ROUNDS})",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="warm-up turns per replica count (default max(20, turns/10))",
    )
    parser.add_argument(
        "--lease-ttl",
        type=float,
        default=DEFAULT_LEASE_TTL,
        help=f"each replica's --lease-ttl (default {DEFAULT_LEASE_TTL:g}, the "
        "coordinator's own default; leases renew every quarter of it)",
    )
    parser.add_argument(
        "--slots",
        type=int,
        default=DEFAULT_SLOTS,
        help=f"writable and read-only slots per runner (default {DEFAULT_SLOTS})",
    )
    parser.add_argument(
        "--stats-wait",
        type=float,
        default=STATS_WAIT,
        help="seconds to wait before reading PostgreSQL's late counters "
        f"(xact_commit, wal_sync) after a loop (default {STATS_WAIT:g}; below "
        "10 a backend's last second may be missing)",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=IDLE_SECONDS,
        help=f"idle window per replica count that measures the upkeep (default {IDLE_SECONDS:g})",
    )
    parser.add_argument(
        "--pg-commit-rate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure single-row commits/s on a fresh cluster, from 1 and "
        "from --concurrency connections (default on)",
    )
    parser.add_argument(
        "--pg-commit-seconds",
        type=float,
        default=COMMIT_SECONDS,
        help=f"seconds per commit-rate loop (default {COMMIT_SECONDS:g})",
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="also write every figure (each round, the medians, the ceilings) "
        "as JSON to PATH ('-': print JSON only, to stdout)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="data directory for the deployments (logs, stores, tokens); kept. "
        "Default: a temp dir, deleted unless the run broke",
    )
    args = parser.parse_args(argv)
    if min(args.turns, args.concurrency, args.runners, args.rounds, args.slots) < 1:
        parser.error("--turns, --concurrency, --runners, --rounds and --slots must be >= 1")
    if args.lease_ttl <= 0 or args.stats_wait < 0 or args.idle_seconds <= 0:
        parser.error("--lease-ttl and --idle-seconds must be > 0, --stats-wait >= 0")
    if args.pg_commit_seconds <= 0:
        parser.error("--pg-commit-seconds must be > 0")
    if args.warmup is None:
        args.warmup = max(20, args.turns // 10)
    return args


@contextlib.contextmanager
def data_dir(out: str | None) -> Iterator[Path]:
    if out is not None:
        root = Path(out).resolve()
        root.mkdir(parents=True, exist_ok=True)
        yield root
        return
    root = Path(tempfile.mkdtemp(prefix="turnwire-replicas-"))
    failed = True
    try:
        yield root
        failed = False
    finally:
        if failed:
            print(f"bench files kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def run(args: argparse.Namespace) -> Report:
    settings = Settings(
        turns=args.turns, concurrency=args.concurrency, runners=args.runners,
        rounds=args.rounds, warmup=args.warmup, lease_ttl=args.lease_ttl, slots=args.slots,
        stats_wait=args.stats_wait, idle_seconds=args.idle_seconds,
    )  # fmt: skip
    report = Report(settings, [], [], os.cpu_count() or 0, os.getloadavg()[0])
    with data_dir(args.out) as root:
        area = Scratch(root, [])
        try:
            asyncio.run(wait_quiet(progress))
            echo = area.start(
                "echo-server", python_module("bench.baseline", "--serve"),
                healthy=False,
            )  # fmt: skip
            progress(f"echo server pid {echo.pid} at {echo.address}; data in {root}")
            for replicas in args.replicas:
                asyncio.run(wait_quiet(progress))  # as e2e.py before each journal
                report.counts.append(run_count(replicas, root, echo.address, settings))
        finally:
            area.stop_all()
        if args.pg_commit_rate:
            levels = sorted({1, args.concurrency})
            report.commit_rates = measure_commit_rates(
                levels, args.pg_commit_seconds, args.stats_wait
            )
    report.load_after = os.getloadavg()[0]
    return report


def _stop_on_sigterm(signum: int, frame: object) -> None:
    del signum, frame
    raise SystemExit(143)  # unwinds every finally: each process stopped by its PID


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    missing = missing_binary()
    if missing is not None:
        print(f"replicas.py: needs a PostgreSQL cluster: {missing} not found", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        report = run(args)
    except (BenchBroke, LaunchError, TimeoutError) as error:
        print(f"replicas.py: broke: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    document = json.dumps(report.as_json(), indent=2, sort_keys=True)
    if args.json == "-":
        print(document)
    else:
        print_report(report)
        if args.json is not None:
            Path(args.json).write_text(document + "\n")
    return 0 if report.all_succeeded else 1


if __name__ == "__main__":
    sys.exit(main())
