"""Seeded chaos against a local deployment, judged by the invariant oracle.

The run, all bounded in time:

1. **Load**: turns submitted at a steady rate through the public API (a few
   cancelled at random), for ``seconds``.
2. **Faults in cycles**: every ``cycle`` seconds the schedule switches faults
   on the coordinator -> runner path (through each runner's fault proxy) on or
   off, and may SIGKILL and restart a runner (store kept or wiped) or the
   coordinator.
3. **Heal**: rules cleared, everything running; **quiescence**: wait until
   every accepted turn is terminal (bounded).
4. **Oracle**: PROTOCOL.md §8 items 1-6 over the journal, every runner store
   and the metered ledger.

The schedule is a pure function of the seed (:func:`plan_schedule`): the same
seed replays the same faults, restarts and cancels in the same cycles. The
proxies' probabilistic rules are seeded from it too; only the timing of the
services themselves varies between runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from turnwire.client import AsyncTurnwireClient, RetryLater, TurnwireError
from turnwire.deployment import LocalDeployment
from turnwire.faults import FaultControlClient, parse_rule
from turnwire.harness import Verdict, check_run, outcomes

# Coordinator timings for chaos: short, so ambiguity resolves within a cycle.
CHAOS_COORDINATOR_ARGS = (
    "--preflight-timeout", "0.5",
    "--dispatch-timeout", "1.0",
    "--cancel-timeout", "0.5",
    "--release-timeout", "0.5",
    "--backoff-max", "0.5",
    "--reconcile-deadline", "8",
    "--default-max-attempts", "6",
    "--log-level", "WARNING",
)  # fmt: skip

# What a cycle may switch on, per proxy. "{p}" is filled from the schedule.
FAULT_MENU = (
    "drop-request method=Dispatch p={p}",
    "drop-response method=Dispatch p={p}",
    "delay-response method=Dispatch ms=1500 p={p}",  # past the 1 s dispatch deadline
    "reset method=Dispatch p={p}",
    "reset method=Dispatch at=response p={p}",
    "drop-response method=GetOperationStatus p={p}",
    "drop-response method=BatchGetOperationStatus p={p}",
    "drop-request method=Cancel p={p}",
    "drop-response method=Cancel p={p}",
    "reset method=WatchOperations at=response messages=2",
    "blackhole for=2s",
)


@dataclass(frozen=True)
class CycleEvents:
    """What happens in one cycle of the schedule."""

    index: int
    rules: dict[int, tuple[str, ...]]  # runner index -> rule texts (empty: faults off)
    restart_runner: int | None = None
    wipe_store: bool = False
    restart_coordinator: bool = False


@dataclass(frozen=True)
class ChaosPlan:
    seconds: float = 60.0
    seed: int = 0
    cycle: float = 3.0
    rate: float = 10.0  # turns submitted per second
    concurrency: int = 16
    runners: int = 2
    cancel_fraction: float = 0.05
    settle_timeout: float = 120.0

    @property
    def cycles(self) -> int:
        return max(1, int(self.seconds // self.cycle))


def plan_schedule(plan: ChaosPlan) -> list[CycleEvents]:
    """The fault schedule: a pure function of the plan (and so of the seed)."""
    rng = random.Random(plan.seed)
    schedule = []
    for index in range(plan.cycles):
        faults_on = index % 2 == 0  # on/off cycles; the last heal happens after all
        rules: dict[int, tuple[str, ...]] = {}
        for runner in range(plan.runners):
            if faults_on:
                picks = rng.sample(FAULT_MENU, k=rng.randint(1, 3))
                p = rng.choice((0.1, 0.2, 0.3))
                rules[runner] = tuple(text.format(p=p) for text in picks)
            else:
                rules[runner] = ()
        roll = rng.random()
        restart_runner = rng.randrange(plan.runners) if roll < 0.25 else None
        schedule.append(
            CycleEvents(
                index=index,
                rules=rules,
                restart_runner=restart_runner,
                wipe_store=restart_runner is not None and rng.random() < 0.2,
                restart_coordinator=restart_runner is None and 0.25 <= roll < 0.35,
            )
        )
    return schedule


def unknown_never_executed(verdict: Verdict, reason: str = "") -> int:
    """Terminal operations left with execution UNKNOWN although the metered ledger
    shows no executor start for them (of ``reason`` only, when given): ambiguity
    nobody could settle, or one a tombstone could have (C14, R5)."""
    return outcomes.unknown_never_executed(verdict.run.histories.values(), reason)


@dataclass
class ChaosTally:
    submitted: list[str] = field(default_factory=list)
    cancels: int = 0
    submit_retries: int = 0
    restarts: Counter[str] = field(default_factory=Counter)
    verdict: Verdict | None = None


class _Load:
    """Steady submissions at ``rate``; a failed submit is retried with its key."""

    def __init__(self, deployment: LocalDeployment, plan: ChaosPlan, tally: ChaosTally) -> None:
        self.deployment = deployment
        self.plan = plan
        self.tally = tally
        self.rng = random.Random(plan.seed ^ 0x5EED)
        self.stop = asyncio.Event()
        self.client: AsyncTurnwireClient | None = None

    async def _one(self, index: int, semaphore: asyncio.Semaphore) -> None:
        key = f"chaos-{self.plan.seed}-{index}"
        policy = self.rng.choices(("probe-first", "never-automatic", "safe"), weights=(85, 10, 5))[
            0
        ]
        params = {"sleep_ms": str(self.rng.randint(0, 600))}
        cancel_after = self.rng.random() < self.plan.cancel_fraction
        client = self.client
        assert client is not None, "run() opens the client"
        async with semaphore:
            for _ in range(20):  # bounded: the coordinator may be restarting
                try:
                    submitted = await client.submit(
                        items=[f"chaos turn {index}"], model="builtin/metered",
                        parameters=params, replay_policy=policy, idempotency_key=key,
                    )  # fmt: skip
                    op_id = submitted.operation.operation_id
                    if op_id not in self.tally.submitted:
                        self.tally.submitted.append(op_id)
                    if cancel_after:
                        await asyncio.sleep(self.rng.random() * 0.5)
                        await client.cancel(op_id)
                        self.tally.cancels += 1
                    return
                except RetryLater:
                    self.tally.submit_retries += 1
                    await asyncio.sleep(0.5)

    async def run(self) -> None:
        semaphore = asyncio.Semaphore(self.plan.concurrency)
        tasks: set[asyncio.Task[None]] = set()
        index = 0
        async with AsyncTurnwireClient(
            self.deployment.address,
            self.deployment.token,
            credentials=self.deployment.client_credentials(),
        ) as client:
            self.client = client
            while not self.stop.is_set():
                task = asyncio.create_task(self._one(index, semaphore))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                index += 1
                with contextlib.suppress(TimeoutError):  # the pacing tick
                    await asyncio.wait_for(self.stop.wait(), 1.0 / self.plan.rate)
            if tasks:
                await asyncio.gather(*tasks)


async def _apply_cycle(deployment: LocalDeployment, events: CycleEvents, tally: ChaosTally) -> None:
    for runner, texts in events.rules.items():
        async with FaultControlClient(deployment.runners[runner].control_address) as control:
            await control.clear()
            for text in texts:
                await control.add(parse_rule(text))
    if events.restart_runner is not None:
        name = deployment.runners[events.restart_runner].name
        await asyncio.to_thread(
            deployment.restart_runner, name, hard=True, wipe_store=events.wipe_store
        )
        tally.restarts[f"{name} (store wiped)" if events.wipe_store else name] += 1
    if events.restart_coordinator:
        await asyncio.to_thread(deployment.restart_coordinator, hard=True)
        tally.restarts["coordinator"] += 1


async def _heal(deployment: LocalDeployment) -> None:
    for slot in deployment.runners:
        async with FaultControlClient(slot.control_address) as control:
            await control.clear()


async def _quiesce(
    deployment: LocalDeployment, tally: ChaosTally, within: float,
    progress: Callable[[str], None],
) -> None:  # fmt: skip
    deadline = time.monotonic() + within
    open_ids = list(tally.submitted)
    async with AsyncTurnwireClient(
        deployment.address, deployment.token, credentials=deployment.client_credentials()
    ) as client:
        while open_ids and time.monotonic() < deadline:
            still = []
            for op_id in open_ids:
                try:
                    if not (await client.get(op_id)).is_terminal:
                        still.append(op_id)
                except TurnwireError:
                    still.append(op_id)
            open_ids = still
            progress(f"quiescence: {len(open_ids)} of {len(tally.submitted)} not yet terminal")
            if open_ids:
                await asyncio.sleep(1.0)


async def run_chaos(
    deployment: LocalDeployment, plan: ChaosPlan, progress: Callable[[str], None]
) -> ChaosTally:
    tally = ChaosTally()
    schedule = plan_schedule(plan)
    load = _Load(deployment, plan, tally)
    loading = asyncio.create_task(load.run())
    started = time.monotonic()
    try:
        for events in schedule:
            await _apply_cycle(deployment, events, tally)
            rules = "; ".join(
                f"r{runner + 1}: {', '.join(texts) or 'none'}"
                for runner, texts in events.rules.items()
            )
            extra = []
            if events.restart_runner is not None:
                extra.append(
                    f"restart r{events.restart_runner + 1}"
                    + (" (wiped)" if events.wipe_store else "")
                )
            if events.restart_coordinator:
                extra.append("restart coordinator")
            progress(
                f"t={time.monotonic() - started:5.1f}s cycle {events.index + 1}/{len(schedule)} "
                f"submitted {len(tally.submitted)} | {rules}"
                + (f" | {', '.join(extra)}" if extra else "")
            )
            await asyncio.sleep(plan.cycle)
    finally:
        load.stop.set()
        await loading
    progress(f"heal: faults cleared after {time.monotonic() - started:.1f}s")
    await _heal(deployment)
    await _quiesce(deployment, tally, plan.settle_timeout, progress)
    tally.verdict = await asyncio.to_thread(
        check_run,
        deployment.journal,
        [slot.store for slot in deployment.runners],
        deployment.ledger,
    )
    return tally
