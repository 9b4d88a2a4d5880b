"""End-to-end Turnwire figures next to the raw gRPC baseline, in one run.

    .venv/bin/python bench/e2e.py [--turns N] [--skip-postgres] [--json]

Measures, each sequentially (1 in flight) and with 16 in flight, after a
warm-up:

1. the raw gRPC echo baseline (``bench/baseline.py --serve`` in its own
   process; the loop runs here), the denominator of every ratio;
2. the system with no-op turns (runners ``python -m runner_svc serve
   --executor echo`` as processes; the coordinator and the SDK client in
   this process), on SQLite and on a throwaway PostgreSQL cluster.

One operation is submit -> terminal: SubmitTurn, then a WatchOperation
stream until a terminal event. Per configuration it prints ops/s, p50/p99
latency, journal commits per op and coordinator -> runner RPCs per op (by
method), and ops/s and p50 as ratios to the baseline of the same run.
Counter deltas are taken after the system is quiet again (every Release
done), so trailing work after the terminal state counts, but not its time.

It prints figures and never judges speed: exit 0 unless something broke
(a process did not start, a wait ran out, or a no-op turn did not succeed).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import grpc

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
for _path in (str(REPO_ROOT), str(BENCH_DIR)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from baseline import ECHO_METHOD, Figures, measure  # noqa: E402
from counting_journal import CountingJournal  # noqa: E402
from e2e_report import (  # noqa: E402
    RPC_METHODS,
    BaselineResult,
    Report,
    SystemResult,
    print_report,
)

from coordinator_svc.app import RunningCoordinator, start_coordinator  # noqa: E402
from coordinator_svc.config import CoordinatorConfig, RunnerEndpoint  # noqa: E402
from coordinator_svc.storage import migrate, open_journal  # noqa: E402
from turnwire.client import AsyncTurnwireClient, OperationState  # noqa: E402
from turnwire.launcher import LaunchError, ManagedProcess, python_module  # noqa: E402

IN_FLIGHT = (1, 16)
PAYLOAD = b"x" * 256  # about the size of a small SubmitTurn request
START_TIMEOUT = 60.0  # one process start, or one PostgreSQL cluster start
RPC_TIMEOUT = 10.0  # one echo, or one client call (the SDK's own default)
TURN_TIMEOUT = 30.0  # one submit -> terminal
LOOP_TIMEOUT = 240.0  # one whole measured (or warm-up) loop
SETTLE_TIMEOUT = 15.0  # for trailing Releases after a loop
SETTLE_QUIET_POLLS = 4
SETTLE_POLL = 0.05
STOP_GRACE = 5.0


class BenchBroke(RuntimeError):
    """Something the bench needs did not work (not: something was slow)."""


@dataclass(frozen=True)
class Plan:
    """How many operations each loop runs."""

    sequential: int
    concurrent: int
    runners: int
    slots: int

    def count(self, in_flight: int) -> int:
        return self.sequential if in_flight == 1 else self.concurrent

    def warmup(self, in_flight: int) -> int:
        return max(5, self.count(in_flight) // 10)


# --- processes --------------------------------------------------------------


@dataclass
class Scratch:
    """The run's temp dir and every process started in it (ended by PID)."""

    root: Path
    processes: list[ManagedProcess]

    def start(self, name: str, argv: list[str], *, healthy: bool) -> ManagedProcess:
        process = ManagedProcess(
            name, argv, self.root / "logs" / f"{name}.log", self.root / f"{name}.addr"
        )
        self.processes.append(process)
        process.start(START_TIMEOUT)
        if healthy:
            process.wait_healthy(START_TIMEOUT)
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
            "--log-level", "WARNING",
        )  # fmt: skip
        runners.append(area.start(name, argv, healthy=True))
    return runners


def process_cpu_seconds(pid: int | None) -> float:
    """User + system CPU of another process so far (Linux /proc; 0.0 where unknown)."""
    try:
        after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(after_name[11]) + int(after_name[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


# --- the baseline -----------------------------------------------------------


async def measure_baseline(area: Scratch, plan: Plan) -> list[BaselineResult]:
    """The echo loop against a server process, as the system's client loop runs."""
    server = area.start(
        "echo-server", [sys.executable, str(BENCH_DIR / "baseline.py"), "--serve"], healthy=False
    )
    async with grpc.aio.insecure_channel(server.address) as channel:
        call = channel.unary_unary(ECHO_METHOD)

        async def echo_once(index: int) -> None:
            del index
            await call(PAYLOAD, timeout=RPC_TIMEOUT)

        results = [await baseline_loop(echo_once, server, n, plan) for n in IN_FLIGHT]
    server.terminate(STOP_GRACE)
    return results


async def baseline_loop(
    echo_once: Callable[[int], Awaitable[None]], server: ManagedProcess, in_flight: int, plan: Plan
) -> BaselineResult:
    label = f"grpc echo x{in_flight}"
    async with asyncio.timeout(LOOP_TIMEOUT):
        await measure("warm-up", echo_once, plan.warmup(in_flight), in_flight)
        client_cpu, server_cpu = time.process_time(), process_cpu_seconds(server.pid)
        figures = await measure(label, echo_once, plan.count(in_flight), in_flight)
        client_cpu = time.process_time() - client_cpu
        server_cpu = process_cpu_seconds(server.pid) - server_cpu
    progress(f"{label}: {figures.ops_per_second:.0f} ops/s")
    ops = figures.operations
    return BaselineResult(in_flight, figures, client_cpu * 1000 / ops, server_cpu * 1000 / ops)


# --- the system -------------------------------------------------------------


@dataclass
class Stack:
    """One system under test: runner processes, the coordinator and a client."""

    journal: str
    runners: list[ManagedProcess]
    coordinator: RunningCoordinator
    counting: CountingJournal  # the coordinator's journal
    client: AsyncTurnwireClient


@dataclass(frozen=True)
class Counters:
    """What the coordinator has counted so far, and the CPU spent so far."""

    journal_commits: int
    dispatcher_commits: int
    rpc_calls: Mapping[str, int]
    journal_calls: Mapping[str, int]
    cpu_here: float = 0.0  # this process: the coordinator and the client
    cpu_runners: float = 0.0

    @classmethod
    def read(cls, stack: Stack) -> Counters:
        metrics = stack.coordinator.dispatcher.metrics
        return cls(
            stack.coordinator.journal.commits,
            metrics.commits,
            dict(metrics.rpc_calls),
            dict(stack.counting.calls),
            time.process_time(),
            sum(process_cpu_seconds(r.pid) for r in stack.runners),
        )

    def minus(self, earlier: Counters) -> Counters:
        return Counters(
            self.journal_commits - earlier.journal_commits,
            self.dispatcher_commits - earlier.dispatcher_commits,
            _difference(self.rpc_calls, earlier.rpc_calls),
            _difference(self.journal_calls, earlier.journal_calls),
            self.cpu_here - earlier.cpu_here,
            self.cpu_runners - earlier.cpu_runners,
        )

    def counts(self) -> tuple[int, int, Mapping[str, int]]:
        """What must stop moving before a loop counts as finished (not the
        journal reads: the due scan reads every idle_poll seconds)."""
        return self.journal_commits, self.dispatcher_commits, self.rpc_calls


def _difference(later: Mapping[str, int], earlier: Mapping[str, int]) -> dict[str, int]:
    return {k: later.get(k, 0) - earlier.get(k, 0) for k in set(later) | set(earlier)}


async def settle(stack: Stack) -> None:
    """Wait (bounded) until nothing is left to release and the counters stop moving."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    last, quiet = Counters.read(stack).counts(), 0
    while quiet < SETTLE_QUIET_POLLS:
        if time.monotonic() > deadline:
            raise BenchBroke(f"the coordinator was still busy {SETTLE_TIMEOUT:.0f}s after a loop")
        await asyncio.sleep(SETTLE_POLL)
        now = Counters.read(stack).counts()
        pending = await stack.counting.inner.due(datetime.now(UTC), 1)  # not counted
        quiet = quiet + 1 if now == last and not pending else 0
        last = now


async def one_turn(client: AsyncTurnwireClient) -> OperationState:
    """Submit a no-op turn; follow its watch stream to the terminal state."""
    submitted = await client.submit(items=["bench"], model="builtin/echo")
    operation = submitted.operation
    if operation.is_terminal:
        return operation.state
    events = client.watch(
        operation.operation_id, operation.last_event_sequence, timeout=TURN_TIMEOUT
    )
    async for event in events:
        if event.is_terminal:
            return event.to_state
    # The stream ended without a terminal event: ask (the SDK's wait is bounded).
    return (await client.wait(operation.operation_id, timeout=TURN_TIMEOUT)).state


async def measure_system_loop(stack: Stack, in_flight: int, plan: Plan) -> SystemResult:
    states: collections.Counter[str] = collections.Counter()

    async def turn(index: int) -> None:
        del index
        states[(await one_turn(stack.client)).value] += 1

    label = f"{stack.journal} x{in_flight}"
    async with asyncio.timeout(LOOP_TIMEOUT):
        await measure("warm-up", turn, plan.warmup(in_flight), in_flight)
        await settle(stack)
        states.clear()
        before = Counters.read(stack)
        figures = await measure(label, turn, plan.count(in_flight), in_flight)
        await settle(stack)
    delta = Counters.read(stack).minus(before)
    progress(f"{label}: {figures.ops_per_second:.0f} ops/s")
    return system_result(stack.journal, in_flight, figures, delta, states)


def system_result(
    journal: str, in_flight: int, figures: Figures, delta: Counters, states: Mapping[str, int]
) -> SystemResult:
    ops = figures.operations
    by_method = {m: delta.rpc_calls.get(m, 0) / ops for m in RPC_METHODS}
    unexpected = sorted(set(delta.rpc_calls) - set(RPC_METHODS))
    for method in unexpected:  # a method added later still counts in the total
        by_method[method] = delta.rpc_calls[method] / ops
    return SystemResult(
        journal=journal,
        in_flight=in_flight,
        figures=figures,
        journal_commits_per_op=delta.journal_commits / ops,
        dispatcher_commits_per_op=delta.dispatcher_commits / ops,
        rpcs_per_op=by_method,
        journal_calls_per_op={m: n / ops for m, n in delta.journal_calls.items() if n},
        states=dict(states),
        cpu_ms_per_op_here=delta.cpu_here * 1000 / ops,
        cpu_ms_per_op_runners=delta.cpu_runners * 1000 / ops,
    )


def write_tokens(area: Scratch) -> tuple[str, str]:
    """A tokens file (coordinator_svc.api.auth format) with one fresh token."""
    token = secrets.token_urlsafe(24)
    path = area.root / "tokens"
    path.write_text(f"bench {hashlib.sha256(token.encode()).hexdigest()}\n")
    path.chmod(0o600)  # the coordinator refuses a tokens file others may read
    return str(path), token


async def measure_system(
    area: Scratch, journal: str, journal_url: str, plan: Plan
) -> list[SystemResult]:
    """Runner processes + in-process coordinator and client on one journal."""
    runners = start_runners(area, journal, plan)
    endpoints = tuple(
        RunnerEndpoint(name=f"runner-{i}", address=r.address) for i, r in enumerate(runners, 1)
    )
    migrate(journal_url)
    tokens_file, token = write_tokens(area)
    config = CoordinatorConfig(
        listen="127.0.0.1:0", journal_url=journal_url, runners=endpoints, tokens_file=tokens_file
    )
    counting = CountingJournal(open_journal(journal_url))
    try:
        coordinator = await start_coordinator(config, journal=counting)
    except BaseException:
        await counting.close()  # ours until start succeeded
        raise
    try:
        async with AsyncTurnwireClient(coordinator.address, token, timeout=RPC_TIMEOUT) as client:
            stack = Stack(journal, runners, coordinator, counting, client)
            return [await measure_system_loop(stack, n, plan) for n in IN_FLIGHT]
    finally:
        await coordinator.stop(grace=STOP_GRACE)
        for runner in runners:  # now, so an idle runner does not share the next loop's CPU
            runner.terminate(STOP_GRACE)


async def measure_postgres(area: Scratch, plan: Plan) -> tuple[list[SystemResult], str | None]:
    """The system on a throwaway PostgreSQL cluster, or why it was skipped."""
    try:
        from tests.support.postgres import ClusterStartError, PostgresCluster, missing_binary
    except ImportError as error:
        return [], f"cannot import the cluster helper: {error}"
    missing = missing_binary()
    if missing is not None:
        return [], f"{missing} not found on PATH"
    cluster = PostgresCluster()
    try:
        try:
            cluster.start()
        except (ClusterStartError, OSError) as error:
            return [], f"the cluster did not start: {str(error).splitlines()[0]}"
        progress(f"postgresql cluster up (postmaster pid {cluster.postmaster_pid()})")
        url = cluster.url(cluster.create_database())
        return await measure_system(area, "postgresql", url, plan), None
    finally:
        cluster.stop()  # pg_ctl stop, then SIGKILL to the postmaster PID if it lingers


# --- the run ----------------------------------------------------------------


def progress(line: str) -> None:
    print(f"[bench] {line}", file=sys.stderr, flush=True)


async def run(args: argparse.Namespace) -> Report:
    plan = Plan(args.turns, args.turns * 2, args.runners, args.slots)
    load_before = os.getloadavg()[0]
    with scratch(args.keep) as area:
        baseline = await measure_baseline(area, plan)
        sqlite_url = f"sqlite:///{area.root / 'journal.db'}"
        systems = await measure_system(area, "sqlite", sqlite_url, plan)
        skipped: str | None = "--skip-postgres"
        if not args.skip_postgres:
            postgres, skipped = await measure_postgres(area, plan)
            systems += postgres
        if skipped is not None:
            progress(f"postgresql: skipped ({skipped})")
    return Report(
        plan.sequential,
        plan.concurrent,
        baseline,
        systems,
        skipped,
        load_before=load_before,
        load_after=os.getloadavg()[0],
        cpus=os.cpu_count() or 0,
    )


async def run_cancellable(args: argparse.Namespace) -> Report:
    """SIGTERM cancels the run, so every finally (and every process stop) runs."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await run(args)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--turns", type=int, default=300, help="ops per sequential loop; 16 in flight runs 2N"
    )
    parser.add_argument("--skip-postgres", action="store_true", help="measure SQLite only")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    parser.add_argument("--runners", type=int, default=1, help="runner processes (default 1)")
    parser.add_argument("--slots", type=int, default=32, help="writable/read-only slots each")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, stores)")
    args = parser.parse_args(argv)
    if args.turns < 1 or args.runners < 1 or args.slots < 1:
        parser.error("--turns, --runners and --slots must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        report = asyncio.run(run_cancellable(args))
    except asyncio.CancelledError:
        print("bench: stopped by SIGTERM", file=sys.stderr)
        return 143
    except (BenchBroke, LaunchError, TimeoutError) as error:
        print(f"bench: broke: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.as_json(), indent=2, sort_keys=True))
    else:
        print_report(report)
    return 0 if report.all_succeeded else 1


if __name__ == "__main__":
    sys.exit(main())
