"""The fuzzer's long run (issue 11): every RPC of both services, against real processes.

    .venv/bin/python -m tests.security.fuzz_long_run --minutes 20 [--seed N] [--json]

Starts a runner (``python -m runner_svc serve``, metered executor with a
ledger, plaintext on 127.0.0.1 with a secret file) and a coordinator
(``python -m coordinator_svc serve``, SQLite journal, that runner) as their own
processes, then fuzzes every RPC of TurnService and RunnerService in rounds
until the time is up, with the strategies and the oracle of
tests/security/rpc_fuzz.py and fuzz_hints.py (the CI budget, tests/security/test_fuzz_budget.py,
runs the same in about 25 s). Each round runs every method twice (typed requests
and raw bytes), ``--examples`` Hypothesis examples each, seeded from ``--seed``
and the round, so a run is reproducible up to what the servers answer.

Every 30 s one progress line: calls, crashes, each process's RSS (VmRSS). At
the end: calls per RPC, crashes (the first few described, request bytes as hex),
leaked slots once quiet (turns the fuzz started must all settle), RSS at start,
max and end for each process, whether the ledger holds only executions the
runner knows and none twice, and whether a normal turn still succeeds. Exit 1
on any crash, leaked slot, stray or repeated execution or failed final turn.

Every loop is bounded; both processes are ended by PID in a ``finally``.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from coordinator_svc.api.auth import Scope, add_token
from tests.security import fuzz_hints, rpc_fuzz
from tests.security.fuzz_hints import Known, Target
from tests.security.rpc_fuzz import Method, Outcome, classify
from turnwire.coordinator.v1 import coordinator_pb2 as C
from turnwire.coordinator.v1 import coordinator_pb2_grpc
from turnwire.launcher import ManagedProcess
from turnwire.ledger import read_ledger
from turnwire.runner.v1 import runner_pb2 as R
from turnwire.runner.v1 import runner_pb2_grpc
from turnwire.secure_channels import runner_sync_channel
from turnwire.testing.processes import start_coordinator_process, start_runner_process
from turnwire.transport_security import (
    SECRET_HEADER,
    RunnerCredentials,
    read_secret_file,
    write_secret_file,
)

PROGRESS_EVERY = 30.0
RSS_EVERY = 2.0
START_TIMEOUT = 60.0
QUIET_TIMEOUT = 60.0
FINAL_TURN_TIMEOUT = 60.0
UNARY_TIMEOUT = 10.0
STREAM_TIMEOUT = 0.25
CRASHES_KEPT = 5


def _rss_kb(process: ManagedProcess) -> int | None:
    try:
        with open(f"/proc/{process.pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


@dataclass
class Rss:
    start: int | None = None
    max: int = 0
    end: int | None = None

    def sample(self, process: ManagedProcess) -> int | None:
        value = _rss_kb(process)
        if value is not None:
            self.start = value if self.start is None else self.start
            self.max = max(self.max, value)
            self.end = value
        return value


@dataclass
class Run:
    """What the fuzz found so far."""

    deadline: float
    say: Callable[[str], None]
    processes: dict[str, ManagedProcess]
    calls: collections.Counter[str] = field(default_factory=collections.Counter)
    crashes: list[str] = field(default_factory=list)
    crash_count: int = 0
    harness_errors: list[str] = field(default_factory=list)
    unary_deadlines: list[str] = field(default_factory=list)
    rss: dict[str, Rss] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    next_progress: float = 0.0
    next_rss: float = 0.0

    def __post_init__(self) -> None:
        self.rss = {name: Rss() for name in self.processes}
        self.next_progress = self.started + PROGRESS_EVERY
        self.sample_rss()

    def time_up(self) -> bool:
        return time.monotonic() >= self.deadline or self.dead() is not None

    def dead(self) -> str | None:
        return next((n for n, p in self.processes.items() if not p.alive()), None)

    def sample_rss(self) -> None:
        self.next_rss = time.monotonic() + RSS_EVERY
        for name, process in self.processes.items():
            self.rss[name].sample(process)

    def record(self, method: Method, outcome: Outcome) -> None:
        self.calls[method.name] += 1
        if outcome.code is grpc.StatusCode.DEADLINE_EXCEEDED and not method.server_streaming:
            self.unary_deadlines.append(outcome.describe())  # a hang, if it ever happens
        crash = classify(outcome)
        if crash is not None:
            self.crash_count += 1
            if len(self.crashes) < CRASHES_KEPT:
                self.crashes.append(crash)
                self.say(f"CRASH {crash[:4000]}")
        now = time.monotonic()
        if now >= self.next_rss:
            self.sample_rss()
        if now >= self.next_progress:
            self.next_progress = now + PROGRESS_EVERY
            rss = ", ".join(f"{n} {r.end or 0} kB" for n, r in self.rss.items())
            self.say(
                f"[{now - self.started:6.0f} s] calls {sum(self.calls.values())}, "
                f"crashes {self.crash_count}, RSS {rss}"
            )


def _fuzz_case(run: Run, channel: Any, target: Target, method: Method, raw: bool, *, examples: int,
               seed_value: int, known: Known, alive: Callable[[], bool]) -> None:  # fmt: skip
    requests = fuzz_hints.calls_for(target, method, raw)
    timeout = STREAM_TIMEOUT if method.server_streaming else UNARY_TIMEOUT

    @seed(seed_value)
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        request = data.draw(requests)  # always drawn: Hypothesis wants the same draws
        if run.time_up():
            return
        try:
            outcome = rpc_fuzz.call(
                channel, method, request.payload, request.metadata,
                credentials=request.credentials, timeout=timeout, alive=alive,
            )  # fmt: skip
            known.note(outcome, method)
        except Exception as error:  # the harness's own failure: reported, never hidden
            run.harness_errors.append(f"{method.name}: {error!r} on {request.payload.hex()}")
            return
        run.record(method, outcome)

    fuzz()


def fuzz_rounds(run: Run, cases: list[tuple[Target, str, Method, bool]], *, examples: int,
                base_seed: int, known: Known) -> int:  # fmt: skip
    """Every case once per round until the time is up; returns the rounds run."""
    rounds = 0
    channels = {address: grpc.insecure_channel(address) for _, address, _, _ in cases}
    try:
        while not run.time_up():
            for index, (target, address, method, raw) in enumerate(cases):
                if run.time_up():
                    break
                process = run.processes["coordinator" if target.service is rpc_fuzz.TURN_SERVICE
                                        else "runner"]  # fmt: skip
                _fuzz_case(
                    run, channels[address], target, method, raw, examples=examples,
                    seed_value=base_seed * 1_000_003 + rounds * 1009 + index,
                    known=known, alive=process.alive,
                )  # fmt: skip
            rounds += 1
    finally:
        for channel in channels.values():
            channel.close()
    return rounds


# --- after the fuzz -----------------------------------------------------------------------


def quiesce(stub: Any) -> tuple[int, int, float]:
    """Wait (bounded) until no slot is in use: (slots still in use, held result-not-saved,
    seconds waited)."""
    started = time.monotonic()
    while True:
        info = stub.GetRunnerInfo(R.GetRunnerInfoRequest(), timeout=10)
        in_use = sum(pool.in_use for pool in info.pools)
        if in_use == 0 or time.monotonic() - started > QUIET_TIMEOUT:
            return in_use, info.held_result_not_saved, time.monotonic() - started
        time.sleep(0.2)


def ledger_check(stub: Any, ledger: Path) -> dict[str, int]:
    """Executions in the ledger, those the runner's store does not know, those repeated."""
    entries = read_ledger(ledger) if ledger.exists() else []
    ids = [entry.operation_id for entry in entries]
    distinct = sorted(set(ids))
    unknown = 0
    for start in range(0, len(distinct), 100):
        chunk = distinct[start : start + 100]
        reply = stub.BatchGetOperationStatus(
            R.BatchGetOperationStatusRequest(operation_ids=chunk), timeout=30
        )
        unknown += sum(1 for entry in reply.entries if not entry.present)
    return {"executions": len(ids), "unknown": unknown, "repeated": len(ids) - len(distinct)}


def final_turn(stub: Any, token: str) -> str:
    """A normal turn through the coordinator: its state once terminal (or when given up)."""
    auth = (("authorization", f"Bearer {token}"),)
    reply = stub.SubmitTurn(fuzz_hints.normal_submit(), metadata=auth, timeout=UNARY_TIMEOUT)
    op = reply.operation.operation_id
    state = reply.operation.state
    deadline = time.monotonic() + FINAL_TURN_TIMEOUT
    terminal = {C.OPERATION_STATE_SUCCEEDED, C.OPERATION_STATE_FAILED, C.OPERATION_STATE_CANCELLED,
                C.OPERATION_STATE_TIMED_OUT, C.OPERATION_STATE_PROTOCOL_ERROR,
                C.OPERATION_STATE_REJECTED}  # fmt: skip
    while state not in terminal and time.monotonic() < deadline:
        time.sleep(0.05)
        got = stub.GetOperation(C.GetOperationRequest(operation_id=op), metadata=auth, timeout=10)
        state = got.operation.state
    return C.OperationState.Name(state).removeprefix("OPERATION_STATE_")


def coordinator_states(stub: Any, token: str) -> dict[str, int]:
    """The fuzzing principal's operations by state (bounded: 100 pages)."""
    auth = (("authorization", f"Bearer {token}"),)
    states: collections.Counter[str] = collections.Counter()
    page = ""
    for _ in range(100):
        request = C.ListOperationsRequest(page_size=500, page_token=page)
        reply = stub.ListOperations(request, metadata=auth, timeout=30)
        for op in reply.operations:
            states[C.OperationState.Name(op.state).removeprefix("OPERATION_STATE_")] += 1
        page = reply.next_page_token
        if not page:
            break
    return dict(states)


# --- the run ------------------------------------------------------------------------------


def start_processes(root: Path) -> tuple[dict[str, ManagedProcess], RunnerCredentials, str]:
    secret_file = root / "runner-secret"
    write_secret_file(secret_file)
    credentials = RunnerCredentials(secret=read_secret_file(secret_file))
    token = add_token(root / "tokens", "fuzz", scopes={Scope.ADMIN})
    processes: dict[str, ManagedProcess] = {}
    quiet = ("--log-level", "WARNING")
    runner = start_runner_process(
        root / "runner.db", root, executor="metered", ledger_path=root / "ledger.jsonl",
        flags=("--drain-seconds", "2", "--plaintext", "--coordinator-secret-file",
               str(secret_file), *quiet),
        timeout=START_TIMEOUT,
    )  # fmt: skip
    processes["runner"] = runner
    runner.wait_healthy(START_TIMEOUT, lambda a: runner_sync_channel(credentials, a))
    coordinator = start_coordinator_process(
        f"sqlite:///{root / 'journal.db'}", root,
        flags=("--tokens-file", str(root / "tokens"), "--runner", f"r1={runner.address}",
               "--plaintext", "--runner-secret-file", str(secret_file), *quiet),
        timeout=START_TIMEOUT,
    )  # fmt: skip
    processes["coordinator"] = coordinator
    coordinator.wait_healthy(START_TIMEOUT)
    return processes, credentials, token


def fuzz(args: argparse.Namespace, root: Path, say: Callable[[str], None],
         processes: dict[str, ManagedProcess]) -> dict[str, Any]:  # fmt: skip
    procs, credentials, token = start_processes(root)
    processes.update(procs)
    runner, coordinator = processes["runner"], processes["coordinator"]
    with runner_sync_channel(credentials, runner.address) as channel:
        info = runner_pb2_grpc.RunnerServiceStub(channel).GetRunnerInfo(
            R.GetRunnerInfoRequest(), timeout=10
        )
    known = Known(incarnation_id=info.incarnation_id)
    bearer = (("authorization", f"Bearer {token}"),)
    targets = [
        (Target(rpc_fuzz.TURN_SERVICE, bearer, (("authorization", "Bearer tw_wrong"),),
                fuzz_hints.coordinator_hints(known)), coordinator.address),
        (Target(rpc_fuzz.RUNNER_SERVICE, credentials.call_metadata,
                ((SECRET_HEADER, "a-wrong-secret-of-enough-length"),),
                fuzz_hints.runner_hints(known)), runner.address),
    ]  # fmt: skip
    cases = [
        (target, address, method, raw)
        for target, address in targets
        for method in target.methods()
        for raw in (False, True)
    ]
    run = Run(time.monotonic() + args.minutes * 60, say, processes)
    say(f"fuzzing {len(cases) // 2} RPCs for {args.minutes:g} min (seed {args.seed}); "
        f"runner pid {runner.pid}, coordinator pid {coordinator.pid}; files in {root}")  # fmt: skip
    rounds = fuzz_rounds(run, cases, examples=args.examples, base_seed=args.seed, known=known)
    dead = run.dead()
    report: dict[str, Any] = {"seed": args.seed, "minutes": args.minutes, "rounds": rounds}
    report["fuzz_seconds"] = round(time.monotonic() - run.started, 1)
    if dead is None:
        with runner_sync_channel(credentials, runner.address) as channel:
            stub = runner_pb2_grpc.RunnerServiceStub(channel)
            leaked, held, waited = quiesce(stub)
            report["ledger"] = ledger_check(stub, root / "ledger.jsonl")
        with grpc.insecure_channel(coordinator.address) as channel:
            api = coordinator_pb2_grpc.TurnServiceStub(channel)
            report["final_turn"] = final_turn(api, token)
            report["coordinator_operations"] = coordinator_states(api, token)
        report.update(leaked_slots=leaked, held_result_not_saved=held,
                      quiesce_seconds=round(waited, 1))  # fmt: skip
    run.sample_rss()
    report.update(
        calls=dict(sorted(run.calls.items())), calls_total=sum(run.calls.values()),
        crashes=run.crash_count + (1 if dead else 0),
        crash_examples=run.crashes + ([f"the {dead} process died"] if dead else []),
        harness_errors=run.harness_errors[:CRASHES_KEPT],
        harness_error_count=len(run.harness_errors),
        unary_deadlines=len(run.unary_deadlines),
        unary_deadline_examples=run.unary_deadlines[:CRASHES_KEPT],
        rss_kb={name: vars(rss) for name, rss in run.rss.items()},
    )  # fmt: skip
    return report


def verdict(report: dict[str, Any]) -> bool:
    ledger = report.get("ledger", {"unknown": -1, "repeated": -1})
    return (
        report.get("crashes") == 0
        and report.get("harness_error_count") == 0
        and all(code == 0 for code in report.get("exit_codes", {}).values())
        and report.get("leaked_slots") == 0
        and report.get("held_result_not_saved") == 0
        and (ledger["unknown"], ledger["repeated"]) == (0, 0)
        and report.get("final_turn") == "SUCCEEDED"
    )


def print_report(report: dict[str, Any]) -> None:
    print(f"fuzzed {report['fuzz_seconds']} s, {report['rounds']} rounds, seed {report['seed']}")
    print(f"calls per RPC ({report['calls_total']} in all):")
    for name, count in report["calls"].items():
        print(f"  {name:<26}{count:>9}")
    print(f"crashes                   {report['crashes']:>9}")
    for crash in report["crash_examples"]:
        print(f"  - {crash[:2000]}")
    print(f"harness errors            {report['harness_error_count']:>9}")
    for error in report["harness_errors"]:
        print(f"  - {error[:2000]}")
    print(f"unary calls past our {UNARY_TIMEOUT:g} s deadline {report['unary_deadlines']:>3}")
    for slow in report["unary_deadline_examples"]:
        print(f"  - {slow[:2000]}")
    print(f"leaked slots once quiet   {report.get('leaked_slots', '?'):>9}"
          f"  (waited {report.get('quiesce_seconds', '?')} s; held result-not-saved "
          f"{report.get('held_result_not_saved', '?')})")  # fmt: skip
    ledger = report.get("ledger", {})
    print(f"ledger executions         {ledger.get('executions', '?'):>9}  (unknown to the runner "
          f"{ledger.get('unknown', '?')}, repeated {ledger.get('repeated', '?')})")  # fmt: skip
    print(f"coordinator operations    {report.get('coordinator_operations', '?')}")
    for name, rss in report["rss_kb"].items():
        print(f"RSS {name:<12} start {rss['start']} kB, max {rss['max']} kB, end {rss['end']} kB")
    print(f"a normal turn afterwards  {report.get('final_turn', 'not tried')}")
    print(f"exit codes on SIGTERM     {report.get('exit_codes')}")
    print("PASS" if report["ok"] else "FAIL")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--examples", type=int, default=25, help="per method and path per round")
    parser.add_argument("--json", action="store_true", help="the report as one JSON line")
    parser.add_argument("--keep", action="store_true", help="keep the run's files and logs")
    args = parser.parse_args(argv)
    out = sys.stderr if args.json else sys.stdout

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    root = Path(tempfile.mkdtemp(prefix="turnwire-fuzz-"))
    processes: dict[str, ManagedProcess] = {}
    report: dict[str, Any] = {}
    try:
        report = fuzz(args, root, say, processes)
    finally:
        codes = {}
        for name in ("coordinator", "runner"):  # by PID; the coordinator first
            if name in processes:
                codes[name] = processes[name].terminate(timeout=20)
        report["exit_codes"] = codes
        failed = not report.get("calls_total") or not verdict(report)
        if args.keep or failed:
            say(f"files kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    report["ok"] = verdict(report)
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        print_report(report)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
