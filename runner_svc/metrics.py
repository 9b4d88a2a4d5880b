"""The runner's Prometheus metrics (issue 13; every family in docs/METRICS.md).

- **slots**, read on the event loop at scrape time: each pool's size and use
  (``RunnerService.pool_use``), whether admission is open, who this
  incarnation is, and the callers its gate refused.
- **instruments updated as things happen**: every Dispatch by outcome
  (``MeteredRunnerService``), every store transaction's latency
  (``MeteredRunnerStore``), and the server's gRPC latency.

Labels are slot kinds, outcomes and errors.proto reasons: never operation ids.
The incarnation and store ids appear once, on ``turnwire_runner_info``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from runner_svc.core.model import RunnerRefusal
from runner_svc.core.transitions import RowEvent
from runner_svc.service import DispatchCall, DispatchOutcome, RunnerService
from runner_svc.storage.sqlite_store import SqliteRunnerStore
from runner_svc.storage.write_batch import Outcome
from runner_svc.transport.access import RunnerGate
from turnwire.observability.metrics_http import new_registry, read_on_loop
from turnwire.observability.rpc_metrics import ServerLatencyInterceptor, server_histogram

# One SQLite transaction with an fsync: about a millisecond on a good disk, far
# more on a slow or busy one.
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class RunnerMetrics:
    """Every instrument of one runner process, on a registry of its own."""

    def __init__(self) -> None:
        self.registry: CollectorRegistry = new_registry()
        self.store_seconds = Histogram(
            "turnwire_store_commit_seconds",
            "Dedupe store write transactions (a group of writes in one fsync'd commit), "
            "from start to commit.",
            buckets=STORE_BUCKETS,
            registry=self.registry,
        )
        self.dispatches = Counter(
            "turnwire_runner_dispatches_total",
            "Dispatch calls by outcome: admitted (a new row), duplicate (the row it already "
            "had, R2), refused (a typed refusal; reason says which).",
            ["outcome", "reason"],
            registry=self.registry,
        )
        self.server_interceptor = ServerLatencyInterceptor(server_histogram(self.registry))
        self.state = RunnerState()
        self.registry.register(self.state)

    def watch(
        self, service: RunnerService, gate: RunnerGate, loop: asyncio.AbstractEventLoop
    ) -> None:
        """Read this service's state (on ``loop``) at every scrape from now on."""
        self.state.service = service
        self.state.gate = gate
        self.state.loop = loop


class MeteredRunnerStore(SqliteRunnerStore):
    """The dedupe store, each write transaction timed (open it with ``.open``;
    ``commit_seconds`` is set right after)."""

    commit_seconds: Histogram | None = None

    def write_batch(self, items: Sequence[tuple[str, RowEvent]]) -> list[Outcome]:
        started = time.perf_counter()
        try:
            return super().write_batch(items)
        finally:
            if self.commit_seconds is not None:
                self.commit_seconds.observe(time.perf_counter() - started)


class MeteredRunnerService(RunnerService):
    """The runner service, every Dispatch counted by how it ended."""

    dispatch_counter: Counter | None = None

    async def dispatch(self, call: DispatchCall) -> DispatchOutcome:
        counter = self.dispatch_counter
        try:
            outcome = await super().dispatch(call)
        except RunnerRefusal as refusal:
            if counter is not None:
                counter.labels("refused", str(refusal.refusal)).inc()
            raise
        if counter is not None:
            counter.labels("duplicate" if outcome.duplicate else "admitted", "").inc()
        return outcome


@dataclass(frozen=True)
class _View:
    pools: tuple[tuple[str, int, int], ...]  # (kind, size, in use)
    accepting: bool
    incarnation_id: str
    store_id: str
    refused: int


@dataclass(eq=False)  # registered in a registry: hashed by identity
class RunnerState(Collector):
    """Families read at scrape time, on the loop that owns them."""

    service: RunnerService | None = None
    gate: RunnerGate | None = None
    loop: asyncio.AbstractEventLoop | None = None

    def describe(self) -> Iterator[Metric]:
        yield from self._families(None)

    def collect(self) -> Iterator[Metric]:
        view = None
        service, gate, loop = self.service, self.gate, self.loop
        if service is not None and gate is not None and loop is not None:

            def read() -> _View:
                return _View(
                    tuple((use.kind.value, use.size, use.in_use) for use in service.pool_use()),
                    service.accepting,
                    service.incarnation_id,
                    service.store.store_id,
                    gate.refused,
                )

            view = read_on_loop(loop, read)
        yield from self._families(view)

    def _families(self, view: _View | None) -> Iterator[Metric]:
        slots = GaugeMetricFamily(
            "turnwire_runner_slots",
            "This runner's slots, by kind (its pool sizes).",
            labels=["kind"],
        )
        in_use = GaugeMetricFamily(
            "turnwire_runner_slots_in_use",
            "This runner's slots held by admitted turns, by kind.",
            labels=["kind"],
        )
        accepting = GaugeMetricFamily(
            "turnwire_runner_accepting",
            "1 while this runner admits new Dispatches, 0 once it is draining or stopping.",
        )
        info = GaugeMetricFamily(
            "turnwire_runner_info",
            "Always 1: who this runner is now (a new incarnation_id after every restart, R1).",
            labels=["incarnation_id", "store_id"],
        )
        refused = CounterMetricFamily(
            "turnwire_runner_refused_callers",
            "Calls refused by the runner's gate: no or a wrong secret, no certificate, or a "
            "certificate that names no coordinator identity (issue 11).",
        )
        if view is not None:
            for kind, size, used in view.pools:
                slots.add_metric([kind], size)
                in_use.add_metric([kind], used)
            accepting.add_metric([], 1 if view.accepting else 0)
            info.add_metric([view.incarnation_id, view.store_id], 1)
            refused.add_metric([], view.refused)
        yield from (slots, in_use, accepting, info, refused)
