"""The demo of the promise: turns under transport loss, counted by the ledger.

``turnwire up --demo`` starts a coordinator and two runners (each its own
process, a fault proxy in front of each runner), then submits a batch of
turns through the public API with the metered executor while

- some Dispatch *responses* are dropped (the runner acted; the coordinator
  must reconcile by preflight and never send again),
- some Dispatch *requests* are dropped (nothing arrived; the coordinator may
  replay exactly, after a same-incarnation absence proof),
- one runner is killed with SIGKILL and restarted mid-run (a new incarnation),

heals the network, waits for every turn to end, and prints what happened:
operations per terminal state, executions counted by the ledger, duplicates
(must be 0), lost turns (must be 0), reconciled without resend, exact
replays, and ambiguous outcomes (TIMED_OUT with execution UNKNOWN).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from turnwire.client import AsyncTurnwireClient, Operation
from turnwire.deployment import LocalDeployment
from turnwire.faults import FaultControlClient, parse_rule
from turnwire.harness import Verdict, check_run
from turnwire.harness.outcomes import (
    explain,
    render_explanation,
    stale_refusals,
    unknown_never_executed,
)
from turnwire.observability.metrics_check import MetricsReport, scrape_deployment


@dataclass(frozen=True)
class DemoPlan:
    turns: int = 60
    concurrency: int = 8
    drop_response_p: float = 0.15
    drop_request_p: float = 0.15
    seed: int = 7
    settle_timeout: float = 180.0


@dataclass
class DemoReport:
    operations: dict[str, Operation] = field(default_factory=dict)
    faults: Counter[str] = field(default_factory=Counter)
    restarted: str = ""
    verdict: Verdict | None = None
    # Issue 13: every process's /metrics, scraped at the end (None: metrics were off).
    metrics: MetricsReport | None = None

    @property
    def by_state(self) -> Counter[str]:
        return Counter(op.state for op in self.operations.values())

    @property
    def not_terminal(self) -> list[str]:
        return [op_id for op_id, op in self.operations.items() if not op.state.is_terminal]


def progress(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


async def _inject(deployment: LocalDeployment, plan: DemoPlan) -> list[FaultControlClient]:
    controls = []
    for slot in deployment.runners:
        control = FaultControlClient(slot.control_address)
        await control.add(parse_rule(f"drop-response method=Dispatch p={plan.drop_response_p}"))
        await control.add(parse_rule(f"drop-request method=Dispatch p={plan.drop_request_p}"))
        controls.append(control)
    return controls


async def _heal(controls: list[FaultControlClient], report: DemoReport) -> None:
    for control in controls:
        stats = await control.stats()
        report.faults["dropped requests"] += stats.dropped_requests
        report.faults["dropped responses"] += stats.dropped_responses
        await control.clear()
        await control.close()


async def _submit_all(
    client: AsyncTurnwireClient, plan: DemoPlan, report: DemoReport, halfway: asyncio.Event
) -> None:
    rng = random.Random(plan.seed)
    semaphore = asyncio.Semaphore(plan.concurrency)

    async def one(index: int) -> None:
        async with semaphore:
            submitted = await client.submit(
                items=[f"turn {index}"],
                model="builtin/metered",
                parameters={"sleep_ms": str(rng.randint(50, 400))},
                idempotency_key=f"demo-{plan.seed}-{index}",
            )
            report.operations[submitted.operation.operation_id] = submitted.operation
            if len(report.operations) >= plan.turns // 2:
                halfway.set()

    await asyncio.gather(*(one(i) for i in range(plan.turns)))


async def _settle(client: AsyncTurnwireClient, report: DemoReport, within: float) -> None:
    deadline = time.monotonic() + within
    last_line = 0.0
    while time.monotonic() < deadline:
        for op_id in list(report.operations):
            if not report.operations[op_id].state.is_terminal:
                report.operations[op_id] = await client.get(op_id)
        open_ops = len(report.not_terminal)
        if time.monotonic() - last_line >= 2 or not open_ops:
            states = ", ".join(f"{k} {v}" for k, v in sorted(report.by_state.items()))
            progress(
                f"{len(report.operations) - open_ops}/{len(report.operations)} ended ({states})"
            )
            last_line = time.monotonic()
        if not open_ops:
            return
        await asyncio.sleep(0.5)


async def run_demo(deployment: LocalDeployment, plan: DemoPlan) -> DemoReport:
    report = DemoReport()
    controls = await _inject(deployment, plan)
    progress(
        f"injecting: Dispatch responses dropped p={plan.drop_response_p}, "
        f"Dispatch requests dropped p={plan.drop_request_p}, on both runners"
    )
    async with AsyncTurnwireClient(
        deployment.address, deployment.token, credentials=deployment.client_credentials()
    ) as client:
        halfway = asyncio.Event()
        submitting = asyncio.create_task(_submit_all(client, plan, report, halfway))
        await asyncio.wait(
            {submitting, asyncio.create_task(halfway.wait())}, return_when=asyncio.FIRST_COMPLETED
        )
        victim = deployment.runners[-1].name
        progress(f"{len(report.operations)} submitted; SIGKILL {victim} and restart it")
        await asyncio.to_thread(deployment.restart_runner, victim, hard=True)
        report.restarted = victim
        await submitting
        progress(f"all {plan.turns} submitted; healing the network")
        await _heal(controls, report)
        await _settle(client, report, plan.settle_timeout)
    if deployment.metrics:
        report.metrics = await asyncio.to_thread(scrape_deployment, deployment)
    # The oracle judges what the run left on disk, not what the API said.
    report.verdict = await asyncio.to_thread(
        check_run,
        deployment.journal,
        [slot.store for slot in deployment.runners],
        deployment.ledger,
    )
    return report


def render(report: DemoReport) -> str:
    """The table: what ended how, and what the ledger and the oracle counted."""
    verdict = report.verdict
    if verdict is None:
        return "  (no verdict: the run did not finish)"
    figures = verdict.figures
    histories = list(verdict.run.histories.values())
    rows = [
        (f"operations {state}", str(n)) for state, n in sorted(figures.by_terminal_state.items())
    ]
    rows += [
        ("executions (metered ledger)", str(figures.executions)),
        ("duplicates", str(figures.duplicates)),
        ("lost (not terminal)", str(figures.lost)),
        ("reconciled without resend", str(figures.reconciled_without_resend)),
        ("exact replays", str(figures.replays)),
        ("ambiguous (TIMED_OUT, UNKNOWN)", str(figures.ambiguous)),
        ("UNKNOWN, never executed (ledger)", str(unknown_never_executed(histories))),
        (
            "  of them INCARNATION_CHANGED",
            str(unknown_never_executed(histories, "INCARNATION_CHANGED")),
        ),
        ("Dispatches refused stale, re-sent", str(stale_refusals(histories))),
        *((f"injected: {name}", str(n)) for name, n in sorted(report.faults.items())),
        ("runner restarted (SIGKILL)", report.restarted or "-"),
        ("oracle (PROTOCOL.md §8 1-6)", verdict.status.value),
    ]
    width = max(len(name) for name, _ in rows)
    parts = ["\n".join(f"  {name:<{width}}  {value:>8}" for name, value in rows)]
    explanation = render_explanation(explain(verdict.run.histories.values()))
    if explanation:
        parts.append(explanation)
    if report.metrics is not None:
        parts.append(report.metrics.render())
    return "\n".join(parts)


def verdict(report: DemoReport) -> int:
    """0 when the promise held: no duplicate, nothing lost, no invariant broken."""
    result = report.verdict
    if result is None:
        print("no verdict: the run did not finish", file=sys.stderr)
        return 1
    if result.figures.duplicates or result.figures.lost or result.violations:
        print(render_violations(result), file=sys.stderr)
        print("PROMISE BROKEN: see the histories above", file=sys.stderr)
        return 1
    if report.metrics is not None and report.metrics.missing:
        missing = ", ".join(report.metrics.missing)
        print(f"METRICS MISSING (docs/METRICS.md lists them): {missing}", file=sys.stderr)
        return 1
    print("promise held: no turn executed twice, none lost, every status true")
    return 0


def render_violations(result: Verdict) -> str:
    from turnwire.harness import render as render_verdict

    return render_verdict(result)
