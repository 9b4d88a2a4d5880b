"""End-to-end Turnwire figures next to the raw gRPC baseline, in one run.

    .venv/bin/python -m bench e2e [--turns N] [--in-flight 1,16,64] [--skip-postgres] [--json]
    .venv/bin/python -m bench e2e --peers [--quick]     # and the peer harness, one table

Measures, each at every ``--in-flight`` level (default 1, 16 and 64 calls in
flight; ``--turns`` N operations one at a time, 2N at 16, 8N at 64: Plan.count),
after a warm-up:

1. the raw gRPC echo baseline (``python -m bench.baseline --serve``, its own
   process; the loop runs here), the denominator of every ratio;
2. the system with no-op turns, every part its own process: runners
   (``python -m runner_svc serve --executor echo``), the coordinator
   (``python -m bench.counting_coordinator``: the real coordinator, started as
   ``python -m coordinator_svc serve`` starts it, with its journal calls
   counted) and the SDK client (this process); on SQLite and on a throwaway
   PostgreSQL cluster.

One operation is submit -> terminal: one SubmitAndWatch call streamed to the
terminal event (the SDK's submit_and_wait), or with ``--api two-calls``
SubmitTurn, then a WatchOperation stream until a terminal event. Per
configuration it prints ops/s, p50/p99 latency (and at the end a table of
p50, p99 and p99/p50 for every row and level), journal commits and reads
per op, coordinator -> runner RPCs per op (by method), CPU ms per op of each
process (the client, the coordinator, each runner, the PostgreSQL server
with its backends) and their sum (the stack), and ops/s and p50 as ratios to
the baseline of the same run. The counters come from the coordinator process
(a snapshot on SIGUSR1, see counting_coordinator.py), taken after the system
is quiet again (every Release done): trailing work after the terminal state
counts (in the counters and in the servers' CPU), but not its time; the
client's CPU is its measured loop only.

``--peers`` runs ``../shared/bench-peers/run_all.py`` first, then all of the
above, and prints one table of both (bench/peers.py).

It prints figures and never judges speed: exit 0 unless something broke
(a process did not start, a wait ran out, or a no-op turn did not succeed).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import grpc

from bench import peers
from bench.baseline import ECHO_METHOD, Figures, measure
from bench.e2e_processes import (
    CALLERS_PER_TURNS,
    IN_FLIGHT,
    MAX_RUNNERS,
    STOP_GRACE,
    BenchBroke,
    CoordinatorProcess,
    Counters,
    Plan,
    Scratch,
    scratch,
    start_coordinator,
    start_runners,
    tree_cpu_seconds,
    wait_quiet,
)
from bench.e2e_report import (
    RPC_METHODS,
    BaselineResult,
    Report,
    SystemResult,
    median_run,
    print_report,
)
from turnwire.client import AsyncTurnwireClient, OperationState
from turnwire.launcher import LaunchError, ManagedProcess, python_module
from turnwire.secure_channels import channel_credentials

PAYLOAD = b"x" * 256  # about the size of a small SubmitTurn request
RPC_TIMEOUT = 10.0  # one echo, or one client call (the SDK's own default)
TURN_TIMEOUT = 30.0  # one submit -> terminal
LOOP_TIMEOUT = 240.0  # one whole measured (or warm-up) loop
SETTLE_TIMEOUT = 15.0  # for trailing Releases after a loop
SETTLE_QUIET_POLLS = 4
SETTLE_POLL = 0.05
DEFAULT_TURNS = 300
QUICK_TURNS = 30
MIN_SLOTS = 32
DEFAULT_STREAMS_PER_PRINCIPAL = 32  # the coordinator's --max-streams-per-principal default


def levels(text: str) -> tuple[int, ...]:
    """``--in-flight 1,16,64``: distinct counts of at least 1, in increasing order."""
    try:
        found = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not found or found[0] < 1:
        raise argparse.ArgumentTypeError(f"each level must be at least 1: {text!r}")
    return tuple(found)


# --- the baseline -----------------------------------------------------------


async def measure_baseline(area: Scratch, plan: Plan) -> list[BaselineResult]:
    """The echo loop against a server process, as the system's client loop runs."""
    await wait_quiet(progress)
    server = area.start("echo-server", python_module("bench.baseline", "--serve"), healthy=False)
    async with grpc.aio.insecure_channel(server.address) as channel:
        call = channel.unary_unary(ECHO_METHOD)

        async def echo_once(index: int) -> None:
            del index
            await call(PAYLOAD, timeout=RPC_TIMEOUT)

        results = [await baseline_loop(echo_once, server, n, plan) for n in plan.in_flight]
    server.terminate(STOP_GRACE)
    return results


async def baseline_loop(
    echo_once: Callable[[int], Awaitable[None]], server: ManagedProcess, in_flight: int, plan: Plan
) -> BaselineResult:
    label = f"grpc echo x{in_flight}"
    roots = {"server": server.pid}
    async with asyncio.timeout(LOOP_TIMEOUT):
        await measure("warm-up", echo_once, plan.warmup(in_flight), in_flight)
        server_cpu = tree_cpu_seconds(roots)["server"]
        client_cpu = time.process_time()
        figures = await measure(label, echo_once, plan.count(in_flight), in_flight)
        client_cpu = time.process_time() - client_cpu
        server_cpu = tree_cpu_seconds(roots)["server"] - server_cpu
    ops = figures.operations
    result = BaselineResult(in_flight, figures, client_cpu * 1000 / ops, server_cpu * 1000 / ops)
    progress(
        f"{label}: {figures.ops_per_second:.0f} ops/s, p50 {figures.p50_ms:.2f} ms, "
        f"stack CPU {result.cpu_ms_per_op_stack:.3f} ms/op"
    )
    return result


# --- the system -------------------------------------------------------------


@dataclass
class Stack:
    """One system under test: runner and coordinator processes, a client here."""

    journal: str
    runners: list[ManagedProcess]
    coordinator: CoordinatorProcess
    client: AsyncTurnwireClient
    postgres_pid: int | None = None  # the postmaster, for the PostgreSQL journal

    def processes(self) -> dict[str, int | None]:
        """Every server-side process whose CPU counts, by the name the report shows."""
        named: dict[str, int | None] = {"coordinator": self.coordinator.pid}
        for index, runner in enumerate(self.runners, 1):
            named[f"runner-{index}"] = runner.pid
        if self.postgres_pid is not None:
            named["postgresql"] = self.postgres_pid
        return named


async def settle(stack: Stack) -> Counters:
    """Wait (bounded) until nothing is due and the counters stop moving; return them."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    last, quiet = Counters.from_snapshot(await stack.coordinator.snapshot()), 0
    while quiet < SETTLE_QUIET_POLLS:
        if time.monotonic() > deadline:
            raise BenchBroke(f"the coordinator was still busy {SETTLE_TIMEOUT:.0f}s after a loop")
        await asyncio.sleep(SETTLE_POLL)
        snapshot = await stack.coordinator.snapshot()
        now = Counters.from_snapshot(snapshot)
        quiet = quiet + 1 if now.counts() == last.counts() and not snapshot["due_pending"] else 0
        last = now
    return last


async def one_turn(client: AsyncTurnwireClient, api: str) -> OperationState:
    """Submit a no-op turn and follow it to the terminal state."""
    if api == "one-call":
        return (
            await client.submit_and_wait(
                items=["bench"], model="builtin/echo", timeout=TURN_TIMEOUT
            )
        ).state
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
        states[(await one_turn(stack.client, plan.api)).value] += 1

    label = f"{stack.journal} x{in_flight}"
    processes = stack.processes()
    async with asyncio.timeout(LOOP_TIMEOUT):
        await measure("warm-up", turn, plan.warmup(in_flight), in_flight)
        before = await settle(stack)
        states.clear()
        cpu_before = tree_cpu_seconds(processes)
        client_cpu = time.process_time()
        figures = await measure(label, turn, plan.count(in_flight), in_flight)
        client_cpu = time.process_time() - client_cpu
        after = await settle(stack)
        cpu_after = tree_cpu_seconds(processes)
    cpu = {"client": client_cpu} | {n: cpu_after[n] - cpu_before[n] for n in processes}
    delta = after.minus(before)
    event_loop = stack.coordinator.event_loop
    result = system_result(stack.journal, in_flight, figures, delta, cpu, states, event_loop)
    progress(
        f"{label}: {figures.ops_per_second:.1f} ops/s, p50 {figures.p50_ms:.1f} ms, "
        f"stack CPU {result.cpu_ms_per_op_stack:.2f} ms/op, "
        f"commits/op {result.journal_commits_per_op:.2f}, "
        f"runner RPCs/op {result.total_rpcs_per_op:.2f}"
    )
    return result


def system_result(
    journal: str,
    in_flight: int,
    figures: Figures,
    delta: Counters,
    cpu_seconds: Mapping[str, float],
    states: Mapping[str, int],
    event_loop: str,
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
        journal_transactions_per_op=delta.journal_transactions / ops,
        rpcs_per_op=by_method,
        journal_calls_per_op={m: n / ops for m, n in delta.journal_calls.items() if n},
        states=dict(states),
        cpu_ms_per_op={name: seconds * 1000 / ops for name, seconds in cpu_seconds.items()},
        dispatcher_events={k: v for k, v in sorted(delta.dispatcher_events.items())},
        coordinator_event_loop=event_loop,
    )


def stream_room(plan: Plan) -> tuple[str, ...]:
    """The coordinator lets one principal hold 32 streams by default (a SubmitAndWatch call
    is one) and refuses more, typed; the bench's client is one principal with a stream per
    turn in flight, so at 64 it is given room for them all (twice over: a stream ends a
    moment after its terminal event)."""
    room = max(DEFAULT_STREAMS_PER_PRINCIPAL, 2 * max(plan.in_flight))
    return ("--max-streams-per-principal", str(room))


async def measure_system(
    area: Scratch, journal: str, journal_url: str, plan: Plan, postgres_pid: int | None = None
) -> list[SystemResult]:
    """Runner processes, a coordinator process, and the client here, on one journal."""
    await wait_quiet(progress)
    runners = start_runners(area, journal, plan)
    coordinator = start_coordinator(
        area, journal, journal_url, runners, stream_room(plan), tls=plan.tls
    )
    progress(
        f"{journal}: coordinator pid {coordinator.pid} at {coordinator.address}, "
        + ", ".join(f"runner-{i} pid {r.pid} at {r.address}" for i, r in enumerate(runners, 1))
        + f"; the coordinator runs on {coordinator.event_loop}"
    )
    try:
        trust = (
            channel_credentials(area.coordinator_tls(), present_certificate=False)
            if plan.tls
            else None
        )
        async with AsyncTurnwireClient(
            coordinator.address, coordinator.token, timeout=RPC_TIMEOUT, credentials=trust
        ) as client:
            stack = Stack(journal, runners, coordinator, client, postgres_pid)
            return [await measure_system_loop(stack, n, plan) for n in plan.in_flight]
    finally:
        # Now, so idle processes do not share the next configuration's CPU;
        # the coordinator first (it calls the runners).
        stopped = [
            f"coordinator pid {coordinator.pid} (exit {coordinator.process.terminate(STOP_GRACE)})"
        ]
        for index, runner in enumerate(runners, 1):
            stopped.append(f"runner-{index} pid {runner.pid} (exit {runner.terminate(STOP_GRACE)})")
        progress(f"{journal}: stopped " + ", ".join(stopped))


async def measure_postgres(area: Scratch, plan: Plan) -> tuple[list[SystemResult], str | None]:
    """The system on a throwaway PostgreSQL cluster, or why it was skipped."""
    try:
        from turnwire.testing.postgres import ClusterStartError, PostgresCluster, missing_binary
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
        postmaster = cluster.postmaster_pid()
        progress(f"postgresql cluster up (postmaster pid {postmaster})")
        url = cluster.url(cluster.create_database())
        return await measure_system(area, "postgresql", url, plan, postmaster), None
    finally:
        cluster.stop()  # pg_ctl stop, then SIGKILL to the postmaster PID if it lingers


# --- the run ----------------------------------------------------------------


def progress(line: str) -> None:
    print(f"[bench] {line}", file=sys.stderr, flush=True)


async def run(args: argparse.Namespace) -> Report:
    if args.runners > MAX_RUNNERS:
        raise SystemExit(f"e2e.py: at most {MAX_RUNNERS} runners")
    plan = Plan(
        args.turns, args.runners, args.slots, args.api, tls=args.tls, in_flight=args.in_flight
    )
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
        {n: plan.count(n) for n in plan.in_flight},
        baseline,
        systems,
        skipped,
        load_before=load_before,
        load_after=os.getloadavg()[0],
        cpus=os.cpu_count() or 0,
        api=plan.api,
        tls=plan.tls,
    )


async def run_cancellable(args: argparse.Namespace) -> Report:
    """SIGTERM cancels the run, so every finally (and every process stop) runs."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await run(args)


def measure_turnwire(args: argparse.Namespace) -> Report:
    """The whole Turnwire run (``--repeat`` times: the median run); raises BenchBroke
    (or LaunchError, TimeoutError) if it broke."""
    reports = []
    for n in range(args.repeat):
        if args.repeat > 1:
            progress(f"run {n + 1} of {args.repeat}")
        reports.append(asyncio.run(run_cancellable(args)))
    return median_run(reports)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--turns",
        type=int,
        default=None,
        help=f"ops per loop one at a time (default {DEFAULT_TURNS}, {QUICK_TURNS} with "
        f"--quick); a level above {CALLERS_PER_TURNS} in flight runs N per "
        f"{CALLERS_PER_TURNS} callers (16: 2N, 64: 8N)",
    )
    parser.add_argument(
        "--in-flight",
        type=levels,
        default=IN_FLIGHT,
        metavar="N,N,...",
        help="calls in flight of each measured loop, echo and system alike (default "
        f"{','.join(map(str, IN_FLIGHT))})",
    )
    parser.add_argument("--skip-postgres", action="store_true", help="measure SQLite only")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure everything N times (a fresh stack each) and report the median run "
        "by mean x echo, with every run's ratios (default 1); this machine moves a single "
        "run's figures by 20-30%%",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    parser.add_argument("--runners", type=int, default=1, help="runner processes (default 1)")
    parser.add_argument(
        "--slots",
        type=int,
        default=None,
        help=f"writable/read-only slots each (default: the most in flight, at least {MIN_SLOTS}, "
        "so a turn waits for the coordinator, not for a slot)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, stores)")
    parser.add_argument(
        "--api",
        choices=("one-call", "two-calls"),
        default="one-call",
        help="how the client runs a turn: one SubmitAndWatch call (default), or SubmitTurn "
        "then WatchOperation",
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="the public API over TLS and coordinator -> runner over mutual TLS (certificates "
        "made for the run); default: plaintext on loopback with the runners' shared secret",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run: --turns {QUICK_TURNS} unless given; with --peers, the peer "
        "harness's --quick (1 round, N x 0.05), at most 5 s of quiet-wait, no re-measuring",
    )
    peers.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.turns is None:
        args.turns = QUICK_TURNS if args.quick else DEFAULT_TURNS
    if args.slots is None:
        args.slots = max(MIN_SLOTS, *args.in_flight)
    if args.turns < 1 or args.runners < 1 or args.slots < 1 or args.repeat < 1:
        parser.error("--turns, --runners, --slots and --repeat must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.peers:
        return peers.run_with_peers(args, measure_turnwire)
    try:
        report = measure_turnwire(args)
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
