"""Turns spread over the replicas, as clients of a replicated service send them.

Each turn goes to one replica (round robin); a submit that fails (the replica
was killed, paused, restarted) is sent again with the same idempotency key to
the next replica: a replay, never a second operation (§7). Settling asks any
live replica (every replica serves every operation's reads, §5).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from turnwire.client.aio import AsyncTurnwireClient
from turnwire.client.failures import TurnwireError
from turnwire.harness.oracle import Verdict, check_run
from turnwire.testing.replicas import ReplicaCluster

SUBMIT_TRIES = 40
CALL_TIMEOUT = 3.0


@dataclass
class Workload:
    cluster: ReplicaCluster
    seed: int = 1
    sleep_ms: tuple[int, int] = (200, 1000)
    submitted: dict[str, str] = field(default_factory=dict)  # key -> operation id
    resubmits: int = 0

    @contextlib.asynccontextmanager
    async def _client(self, name: str) -> AsyncIterator[AsyncTurnwireClient]:
        async with AsyncTurnwireClient(
            self.cluster.address_of(name),
            self.cluster.token,
            timeout=CALL_TIMEOUT,
            retries=0,
            credentials=self.cluster.client_credentials(),
        ) as client:
            yield client

    async def submit(self, count: int, *, concurrency: int = 16, prefix: str = "t") -> None:
        """Submit ``count`` turns (bounded tries each) spread over the replicas."""
        rng = random.Random(self.seed)
        names = self.cluster.names
        gate = asyncio.Semaphore(concurrency)

        async def one(index: int) -> None:
            key = f"{prefix}-{self.seed}-{index}"
            params = {"sleep_ms": str(rng.randint(*self.sleep_ms))}
            order = itertools.islice(itertools.cycle(names), index % len(names), None)
            async with gate:
                for name in itertools.islice(order, SUBMIT_TRIES):
                    if not self.cluster.replicas[name].alive():
                        continue
                    try:
                        async with self._client(name) as client:
                            done = await client.submit(
                                items=[f"replica turn {index}"], model="builtin/metered",
                                parameters=params, idempotency_key=key,
                            )  # fmt: skip
                    except TurnwireError:
                        self.resubmits += 1
                        await asyncio.sleep(0.2)
                        continue
                    self.submitted[key] = done.operation.operation_id
                    return
                raise AssertionError(f"{key}: no replica accepted it in {SUBMIT_TRIES} tries")

        await asyncio.gather(*(one(index) for index in range(count)))

    async def settle(self, within: float) -> float:
        """Seconds until every submitted operation is terminal, asked of live replicas."""
        started = time.monotonic()
        waiting = set(self.submitted.values())
        while waiting and time.monotonic() - started < within:
            name = next(n for n in self.cluster.names if self.cluster.replicas[n].alive())
            async with self._client(name) as client:
                for op_id in sorted(waiting):
                    with contextlib.suppress(TurnwireError):
                        if (await client.get(op_id)).is_terminal:
                            waiting.discard(op_id)
            if waiting:
                await asyncio.sleep(0.5)
        assert not waiting, f"{len(waiting)} operation(s) not terminal after {within}s"
        return time.monotonic() - started

    def verdict(self) -> Verdict:
        return check_run(
            self.cluster.journal,
            [slot.store for slot in self.cluster.runners],
            self.cluster.ledger,
        )


def assert_clean(verdict: Verdict, submitted: int) -> None:
    """§8 1-6 on what the run left: no violation, nothing lost or doubled, all terminal."""
    figures = verdict.figures
    assert not verdict.violations, "\n".join(str(v) for v in verdict.violations[:20])
    assert figures.duplicates == 0
    assert figures.lost == 0
    assert figures.non_terminal == 0
    assert figures.operations == submitted
