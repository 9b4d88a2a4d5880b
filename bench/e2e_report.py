"""What bench/e2e.py found, as values, as text and as JSON (no I/O but print).

Ratios are to the baseline with the same number of calls in flight, from
the same run. Issue #3's happy-path target: at most 3 journal commits and at
most 3 coordinator -> runner RPCs per operation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.baseline import Figures

# Every coordinator -> runner method the dispatcher counts (DispatcherMetrics.rpc_calls).
RPC_METHODS = (
    "GetOperationStatus",
    "BatchGetOperationStatus",
    "Dispatch",
    "Release",
    "Cancel",
    "WatchOperations",
    "GetRunnerInfo",
)
PREFLIGHT_METHODS = ("GetOperationStatus", "BatchGetOperationStatus")
JOURNAL_WRITES = ("submit", "commit", "claim")
TARGET_COMMITS_PER_OP = 3.0
TARGET_RPCS_PER_OP = 3.0


def latency_figures(figures: Figures) -> dict[str, Any]:
    return {
        "operations": figures.operations,
        "seconds": round(figures.seconds, 4),
        "ops_per_second": round(figures.ops_per_second, 2),
        "p50_ms": round(figures.p50_ms, 3),
        "p99_ms": round(figures.p99_ms, 3),
        "p99_over_p50": _rounded(figures.p99_over_p50, 3),
        "mean_ms": round(figures.mean_ms, 3),
    }


@dataclass(frozen=True)
class BaselineResult:
    in_flight: int
    figures: Figures
    cpu_ms_per_op_client: float
    cpu_ms_per_op_server: float

    @property
    def cpu_ms_per_op_stack(self) -> float:
        return self.cpu_ms_per_op_client + self.cpu_ms_per_op_server

    def as_json(self) -> dict[str, Any]:
        return {
            "in_flight": self.in_flight,
            **latency_figures(self.figures),
            "cpu_ms_per_op_client": round(self.cpu_ms_per_op_client, 3),
            "cpu_ms_per_op_server": round(self.cpu_ms_per_op_server, 3),
            "cpu_ms_per_op_stack": round(self.cpu_ms_per_op_stack, 3),
        }


@dataclass(frozen=True)
class SystemResult:
    journal: str
    in_flight: int
    figures: Figures
    journal_commits_per_op: float
    dispatcher_commits_per_op: float
    # Durable transactions (COMMITs) they took: fewer when writes share one.
    journal_transactions_per_op: float
    rpcs_per_op: Mapping[str, float]
    journal_calls_per_op: Mapping[str, float]  # reads and writes, by Journal method
    states: Mapping[str, int]
    # CPU ms/op by process: "client" (the bench process), "coordinator",
    # "runner-N" (each with its children), "postgresql" (the postmaster with
    # its live and exited backends; only with the PostgreSQL journal).
    cpu_ms_per_op: Mapping[str, float]
    dispatcher_events: Mapping[str, int]  # deltas of the dispatcher's other counters
    coordinator_event_loop: str = "?"  # "uvloop" or "asyncio" (turnwire/event_loop.py)

    @property
    def label(self) -> str:
        return f"{self.journal} x{self.in_flight}"

    @property
    def total_rpcs_per_op(self) -> float:
        return sum(self.rpcs_per_op.values())

    @property
    def preflight_rpcs_per_op(self) -> float:
        return sum(self.rpcs_per_op.get(m, 0.0) for m in PREFLIGHT_METHODS)

    @property
    def journal_reads_per_op(self) -> float:
        return sum(v for m, v in self.journal_calls_per_op.items() if m not in JOURNAL_WRITES)

    def cpu(self, name: str) -> float | None:
        return self.cpu_ms_per_op.get(name)

    @property
    def cpu_ms_per_op_runners(self) -> float:
        return sum(v for k, v in self.cpu_ms_per_op.items() if k.startswith("runner-"))

    @property
    def cpu_ms_per_op_stack(self) -> float:
        """Every process of the system: client, coordinator, runners (and PostgreSQL)."""
        return sum(self.cpu_ms_per_op.values())

    @property
    def meets_commit_target(self) -> bool:
        return self.journal_commits_per_op <= TARGET_COMMITS_PER_OP

    @property
    def meets_rpc_target(self) -> bool:
        return self.total_rpcs_per_op <= TARGET_RPCS_PER_OP

    @property
    def succeeded(self) -> bool:
        return set(self.states) <= {"SUCCEEDED"} and sum(self.states.values()) == (
            self.figures.operations
        )

    def ratios(self, base: BaselineResult | None) -> tuple[float | None, float | None]:
        """(ops/s as a fraction of the baseline's, p50 as a multiple of the baseline's)."""
        if base is None or not base.figures.ops_per_second or not base.figures.p50_ms:
            return None, None
        return (
            self.figures.ops_per_second / base.figures.ops_per_second,
            self.figures.p50_ms / base.figures.p50_ms,
        )

    def as_json(self, base: BaselineResult | None) -> dict[str, Any]:
        ops_ratio, p50_ratio = self.ratios(base)
        return {
            "journal": self.journal,
            "in_flight": self.in_flight,
            **latency_figures(self.figures),
            "ops_per_second_vs_baseline": _rounded(ops_ratio, 4),
            "p50_vs_baseline": _rounded(p50_ratio, 2),
            "journal_commits_per_op": round(self.journal_commits_per_op, 3),
            "dispatcher_commits_per_op": round(self.dispatcher_commits_per_op, 3),
            "journal_transactions_per_op": round(self.journal_transactions_per_op, 3),
            "runner_rpcs_per_op": round(self.total_rpcs_per_op, 3),
            "preflight_rpcs_per_op": round(self.preflight_rpcs_per_op, 3),
            "runner_rpcs_per_op_by_method": {
                m: round(v, 3) for m, v in sorted(self.rpcs_per_op.items())
            },
            "journal_reads_per_op": round(self.journal_reads_per_op, 3),
            "journal_calls_per_op_by_method": {
                m: round(v, 3) for m, v in sorted(self.journal_calls_per_op.items())
            },
            "states": dict(sorted(self.states.items())),
            "cpu_ms_per_op_client": round(self.cpu_ms_per_op.get("client", 0.0), 3),
            "cpu_ms_per_op_coordinator": round(self.cpu_ms_per_op.get("coordinator", 0.0), 3),
            "cpu_ms_per_op_runners": round(self.cpu_ms_per_op_runners, 3),
            "cpu_ms_per_op_by_runner": {
                k: round(v, 3) for k, v in self.cpu_ms_per_op.items() if k.startswith("runner-")
            },
            "cpu_ms_per_op_postgresql": _rounded(self.cpu("postgresql"), 3),
            "cpu_ms_per_op_stack": round(self.cpu_ms_per_op_stack, 3),
            "dispatcher_counters": dict(self.dispatcher_events),
            "coordinator_event_loop": self.coordinator_event_loop,
            "meets_commit_target": self.meets_commit_target,
            "meets_rpc_target": self.meets_rpc_target,
        }


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


_API_WORDS = {
    "one-call": "one SubmitAndWatch call",
    "two-calls": "SubmitTurn + WatchOperation",
}


@dataclass(frozen=True)
class RunScore:
    """One run of a --repeat: each system row's ops/s over its own echo's."""

    run: int  # 1-based, in the order the runs were made
    ratios: Mapping[str, float]  # row label ("sqlite x1") -> x echo

    @property
    def score(self) -> float:
        return sum(self.ratios.values()) / len(self.ratios) if self.ratios else 0.0


def score_run(run: int, report: Report) -> RunScore:
    ratios = {}
    for system in report.systems:
        ops_ratio, _ = system.ratios(report.baseline_for(system.in_flight))
        if ops_ratio is not None:
            ratios[system.label] = ops_ratio
    return RunScore(run, ratios)


def median_run(reports: Sequence[Report]) -> Report:
    """The run whose mean "x echo" over its rows is the median of the runs' (the
    lower one of an even count), with every run's ratios attached. A whole run is
    kept, never rows mixed from several: each row's figures stay beside the echo
    measured with them."""
    if not reports:
        raise ValueError("no runs to choose from")
    scores = [score_run(n, report) for n, report in enumerate(reports, start=1)]
    ranked = sorted(scores, key=lambda score: (score.score, score.run))
    chosen = ranked[(len(ranked) - 1) // 2]
    return dataclasses.replace(
        reports[chosen.run - 1],
        runs=tuple(scores) if len(reports) > 1 else (),
        chosen_run=chosen.run,
        all_runs_succeeded=all(report.all_succeeded for report in reports),
    )


@dataclass(frozen=True)
class Report:
    turns: Mapping[int, int]  # calls in flight -> operations each loop at that level ran
    baseline: Sequence[BaselineResult]
    systems: Sequence[SystemResult]
    postgres_skipped: str | None
    # The machine's 1-minute load average before and after, and its CPUs:
    # figures from a busy machine are not comparable with a quiet one's.
    load_before: float
    load_after: float
    cpus: int
    # How the client ran a turn (Plan.api).
    api: str = "one-call"
    # Every hop over TLS (Plan.tls), or plaintext with the runners' shared secret.
    tls: bool = False
    # With --repeat N: every run's ops/s as a fraction of its own echo, row by
    # row, and which run this report is (the median one, see median_run).
    runs: tuple[RunScore, ...] = ()
    chosen_run: int = 1
    # False if any run of a --repeat had a turn that did not succeed.
    all_runs_succeeded: bool = True

    def baseline_for(self, in_flight: int) -> BaselineResult | None:
        return next((b for b in self.baseline if b.in_flight == in_flight), None)

    @property
    def all_succeeded(self) -> bool:
        return self.all_runs_succeeded and all(s.succeeded for s in self.systems)

    def as_json(self) -> dict[str, Any]:
        return {
            "turns": {str(n): count for n, count in sorted(self.turns.items())},
            "api": self.api,
            "tls": self.tls,
            "baseline": [b.as_json() for b in self.baseline],
            "systems": [s.as_json(self.baseline_for(s.in_flight)) for s in self.systems],
            "postgresql": {
                "ran": self.postgres_skipped is None,
                "skipped": self.postgres_skipped,
            },
            "target": {
                "journal_commits_per_op": TARGET_COMMITS_PER_OP,
                "runner_rpcs_per_op": TARGET_RPCS_PER_OP,
            },
            "all_succeeded": self.all_succeeded,
            "runs": [
                {"run": r.run, "x_echo": {k: round(v, 4) for k, v in r.ratios.items()}}
                for r in self.runs
            ],
            "chosen_run": self.chosen_run,
            "machine": {
                "cpus": self.cpus,
                "load_average_1m_before": round(self.load_before, 2),
                "load_average_1m_after": round(self.load_after, 2),
            },
        }


# --- text -------------------------------------------------------------------


def _latency_line(label: str, figures: Figures) -> str:
    return (
        f"{label:<16} {figures.ops_per_second:>8.1f} ops/s   "
        f"p50 {figures.p50_ms:8.2f} ms   p99 {figures.p99_ms:8.2f} ms   "
        f"({figures.operations} ops)"
    )


def _ratio_text(system: SystemResult, base: BaselineResult | None) -> str:
    ops_ratio, p50_ratio = system.ratios(base)
    if ops_ratio is None or p50_ratio is None:
        return "no baseline to compare with"
    return f"{ops_ratio:.3f}x baseline ops/s, p50 {p50_ratio:.0f}x baseline"


def _rpc_text(system: SystemResult) -> str:
    shown = ", ".join(
        f"{m} {v:.2f}" for m, v in sorted(system.rpcs_per_op.items()) if m not in PREFLIGHT_METHODS
    )
    return (
        f"coordinator->runner RPCs/op {system.total_rpcs_per_op:.2f}: "
        f"preflight {system.preflight_rpcs_per_op:.2f} "
        f"(GetOperationStatus {system.rpcs_per_op.get('GetOperationStatus', 0.0):.2f}, "
        f"BatchGetOperationStatus {system.rpcs_per_op.get('BatchGetOperationStatus', 0.0):.2f}), "
        f"{shown}"
    )


def _target_text(system: SystemResult) -> str:
    commits = "met" if system.meets_commit_target else "MISSED"
    rpcs = "met" if system.meets_rpc_target else "MISSED"
    return (
        f"issue #3 target: commits {commits} ({system.journal_commits_per_op:.2f} <= 3?), "
        f"runner RPCs {rpcs} ({system.total_rpcs_per_op:.2f} <= 3?)"
    )


def _cpu_text(system: SystemResult) -> str:
    parts = [f"client (this process) {system.cpu_ms_per_op.get('client', 0.0):.2f}"]
    parts.append(f"coordinator {system.cpu_ms_per_op.get('coordinator', 0.0):.2f}")
    runners = [(k, v) for k, v in system.cpu_ms_per_op.items() if k.startswith("runner-")]
    parts += [f"{name} {value:.2f}" for name, value in runners]
    if len(runners) > 1:
        parts.append(f"(runners {system.cpu_ms_per_op_runners:.2f})")
    members = "client+coordinator+runners"
    postgres = system.cpu("postgresql")
    if postgres is not None:
        parts.append(f"postgresql server {postgres:.2f}")
        members += "+postgresql"
    return (
        "CPU ms/op by process: "
        + ", ".join(parts)
        + f"; stack ({members}) {system.cpu_ms_per_op_stack:.2f}"
        + f" (the coordinator on {system.coordinator_event_loop})"
    )


def _events_lines(system: SystemResult) -> list[str]:
    """The dispatcher's other counters (replays, alarms, ...) when any moved."""
    moved = {k: v for k, v in system.dispatcher_events.items() if v}
    if not moved:
        return []
    return ["    dispatcher also counted: " + ", ".join(f"{k} {v}" for k, v in moved.items())]


def system_lines(system: SystemResult, base: BaselineResult | None) -> list[str]:
    states = ", ".join(f"{k}={v}" for k, v in sorted(system.states.items()))
    return [
        _latency_line(system.label, system.figures),
        f"    {_ratio_text(system, base)}",
        f"    journal commits/op {system.journal_commits_per_op:.2f} "
        f"(by the dispatcher {system.dispatcher_commits_per_op:.2f}; the rest are submits), "
        f"in {system.journal_transactions_per_op:.2f} durable transactions/op",
        f"    journal reads/op {system.journal_reads_per_op:.2f}; calls/op by method: "
        + ", ".join(f"{m} {v:.2f}" for m, v in sorted(system.journal_calls_per_op.items())),
        f"    {_rpc_text(system)}",
        f"    {_target_text(system)}",
        f"    {_cpu_text(system)}",
        f"    terminal states: {states}",
        *_events_lines(system),
    ]


def turns_text(report: Report, each: str = "{count} ops {n} in flight") -> str:
    """'300 ops 1 in flight, 600 ops 16 in flight, ...': what each level's loop ran."""
    return ", ".join(each.format(count=c, n=n) for n, c in sorted(report.turns.items()))


def print_report(report: Report) -> None:
    print(f"Turnwire end-to-end bench: {turns_text(report)}; no-op turns (echo executor)")
    print(
        f"machine: {report.cpus} CPUs, 1-minute load average {report.load_before:.2f} before, "
        f"{report.load_after:.2f} after"
    )
    print("baseline: raw gRPC unary echo, 256 B, server in its own process")
    for base in report.baseline:
        print("  " + _latency_line(f"grpc echo x{base.in_flight}", base.figures))
        print(
            f"      CPU ms/op: client (this process) {base.cpu_ms_per_op_client:.2f}, "
            f"echo server {base.cpu_ms_per_op_server:.2f}; stack {base.cpu_ms_per_op_stack:.2f}"
        )
    print(
        f"system: submit -> terminal ({_API_WORDS.get(report.api, report.api)}); the "
        "coordinator and each runner their own process, the client in this one; "
        + ("TLS to the coordinator, mutual TLS to runners" if report.tls else "plaintext")
    )
    for system in report.systems:
        for line in system_lines(system, report.baseline_for(system.in_flight)):
            print("  " + line)
    if report.postgres_skipped is not None:
        print(f"postgresql: skipped ({report.postgres_skipped})")
    for line in latency_lines(report):
        print(line)
    for line in runs_lines(report):
        print(line)
    if not report.all_succeeded:
        print("SOME NO-OP TURNS DID NOT SUCCEED: the figures above are not the happy path")


LATENCY_ROW = "  {:<12} {:>9} {:>9} {:>7} {:>9} {:>9} {:>8}"


def latency_lines(report: Report) -> list[str]:
    """The latency table: every row at every level, p50, p99 and p99/p50 (how far the
    slowest 1% sit from the middle: queueing shows there first as calls in flight rise)."""
    rows: list[tuple[str, int, Figures, str]] = [
        ("grpc echo", base.in_flight, base.figures, "(base)") for base in report.baseline
    ]
    for system in report.systems:
        ops_ratio, _ = system.ratios(report.baseline_for(system.in_flight))
        x_echo = "-" if ops_ratio is None else f"{ops_ratio:.3f}"
        rows.append((system.journal, system.in_flight, system.figures, x_echo))
    lines = [
        "latency by calls in flight (p99/p50: the slowest 1% against the middle):",
        LATENCY_ROW.format("row", "in flight", "ops/s", "x echo", "p50 ms", "p99 ms", "p99/p50"),
    ]
    for name, in_flight, figures, x_echo in rows:
        tail = figures.p99_over_p50
        lines.append(
            LATENCY_ROW.format(
                name,
                in_flight,
                f"{figures.ops_per_second:.1f}",
                x_echo,
                f"{figures.p50_ms:.2f}",
                f"{figures.p99_ms:.2f}",
                "-" if tail is None else f"{tail:.2f}",
            )
        )
    return lines


def runs_lines(report: Report) -> list[str]:
    """With --repeat: which run the figures are, and every run's x echo per row."""
    if len(report.runs) < 2:
        return []
    lines = [
        f"runs: {len(report.runs)}; the figures above are run {report.chosen_run}, the "
        "median by mean x echo over its rows (each row beside its own run's echo)"
    ]
    for score in report.runs:
        rows = ", ".join(f"{label} {ratio:.3f}" for label, ratio in score.ratios.items())
        mark = " <-" if score.run == report.chosen_run else ""
        lines.append(f"  run {score.run}: mean {score.score:.3f} ({rows}){mark}")
    return lines
