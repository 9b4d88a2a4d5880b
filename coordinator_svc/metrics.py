"""The coordinator's Prometheus metrics (issue 13; every family in docs/METRICS.md).

Three sources, each read where it is true:

- **the journal**, at scrape time: operations by state and execution, and the
  ambiguous ones (execution UNKNOWN) by reason. One GROUP BY on its own
  connection, from the scraping thread; on a PostgreSQL journal shared by
  replicas every replica reports the same whole-journal figures.
- **this process's memory**, read on the event loop at scrape time
  (``read_on_loop``): the dispatcher's counters (``DispatcherMetrics``), the
  scheduler's view of each runner's slots, and each principal's queue.
- **instruments updated as things happen**: journal write latency and the
  submits, attempts and endings seen at each write (``MeteredJournal``), and
  gRPC latency on both sides of the process (``turnwire.observability.rpc_metrics``).

Label values are enum names, configured runner and pool names, and
principals from the tokens file: never operation ids.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.pool import NullPool

from coordinator_svc.core.model import (
    Change,
    EventRecord,
    Execution,
    OperationRecord,
    OpState,
    TurnKind,
)
from coordinator_svc.dispatcher import Dispatcher
from coordinator_svc.ports import Journal
from coordinator_svc.storage.cached import CachedJournal
from coordinator_svc.storage.schema import journal_url
from coordinator_svc.storage.tables import operations
from turnwire.observability.metrics_http import new_registry, read_on_loop
from turnwire.observability.rpc_metrics import (
    ClientLatencyInterceptor,
    ServerLatencyInterceptor,
    client_histogram,
    server_histogram,
)

log = logging.getLogger("coordinator_svc.metrics")

# A journal write: a fsync'd SQLite commit is ~1-10 ms, a PostgreSQL one a few ms,
# one that waits on a lock or a sick disk seconds.
JOURNAL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# How long the journal may take to count its operations before the scrape goes without.
JOURNAL_QUERY_TIMEOUT_SECONDS = 5
# Reasons are errors.proto names; anything else (a journal edited by hand) is "OTHER".
_REASON = re.compile(r"[A-Z][A-Z0-9_]{0,63}")

# The DispatcherMetrics counters exposed, as (attribute, family name, help).
DISPATCHER_COUNTERS = (
    (
        "replays",
        "turnwire_dispatch_replays_total",
        "Dispatch attempts sent while an earlier attempt of the same operation was "
        "unresolved, after the runner proved it absent (C7): exact replays.",
    ),
    (
        "reconciled_without_resend",
        "turnwire_reconciled_without_resend_total",
        "Ambiguous dispatches (DISPATCH_UNKNOWN) resolved by adopting the runner's row, "
        "without sending again.",
    ),
    (
        "ambiguous",
        "turnwire_dispatch_unknown_total",
        "Transitions into DISPATCH_UNKNOWN: a Dispatch whose fate the coordinator could not know.",
    ),
    (
        "alarms",
        "turnwire_protocol_alarms_total",
        "Protocol alarms: a runner contradicted the journal (C10 conflicts, contract "
        "violations). Any increase deserves a look.",
    ),
    (
        "stale_versions",
        "turnwire_journal_stale_versions_total",
        "Journal writes retried because another writer changed the operation first.",
    ),
    (
        "leases_lost",
        "turnwire_leases_lost_total",
        "Operations this replica stopped driving because another replica took them over (§5).",
    ),
)


def _reason_label(reason: str | None) -> str:
    if not reason:
        return "NONE"
    return reason if _REASON.fullmatch(reason) else "OTHER"


class CoordinatorMetrics:
    """Every instrument of one coordinator process, on a registry of its own."""

    def __init__(self, journal_url_text: str | None) -> None:
        self.registry: CollectorRegistry = new_registry()
        self.journal_seconds = Histogram(
            "turnwire_journal_commit_seconds",
            "Durable journal writes as the coordinator waits for them (a shared group "
            "commit included), by write: submit (a new turn, C1) or commit (a transition).",
            ["write"],
            buckets=JOURNAL_BUCKETS,
            registry=self.registry,
        )
        self.submit_replays = Counter(
            "turnwire_submit_replays_total",
            "SubmitTurn and SubmitAndWatch calls answered with the operation an earlier "
            "submit with the same idempotency key created (C1 replays; nothing new was "
            "stored), at the principal's quota too.",
            registry=self.registry,
        )
        self.attempts = Counter(
            "turnwire_attempts_total",
            "Dispatch attempts written ahead to the journal (C4), by runner.",
            ["runner"],
            registry=self.registry,
        )
        self.finished = Counter(
            "turnwire_operations_finished_total",
            "Operations this process brought to a terminal state, by state and execution.",
            ["state", "execution"],
            registry=self.registry,
        )
        self.server_interceptor = ServerLatencyInterceptor(server_histogram(self.registry))
        self.client_interceptor = ClientLatencyInterceptor(client_histogram(self.registry))
        self.state = CoordinatorState(JournalCounts(journal_url_text) if journal_url_text else None)
        self.registry.register(self.state)

    def journal(self, inner: Journal) -> CachedJournal:
        """The coordinator's cached journal, timing and counting its writes."""
        return MeteredJournal(inner, self)

    def watch(self, dispatcher: Dispatcher, loop: asyncio.AbstractEventLoop) -> None:
        """Read this dispatcher's state (on ``loop``) at every scrape from now on."""
        self.state.dispatcher = dispatcher
        self.state.loop = loop

    def close(self) -> None:
        self.state.close()


class MeteredJournal(CachedJournal):
    """The cached journal, its writes timed and what they carry counted (a
    subclass, so everything that looks for the cache still finds it)."""

    def __init__(self, inner: Journal, metrics: CoordinatorMetrics) -> None:
        super().__init__(inner)
        self._metrics = metrics

    async def submit(
        self, operation: OperationRecord, first_event: EventRecord
    ) -> tuple[OperationRecord, bool]:
        started = time.perf_counter()
        try:
            stored, replayed = await super().submit(operation, first_event)
        finally:
            self._metrics.journal_seconds.labels("submit").observe(time.perf_counter() - started)
        return stored, replayed

    async def commit(self, change: Change) -> OperationRecord:
        started = time.perf_counter()
        try:
            stored = await super().commit(change)
        finally:
            self._metrics.journal_seconds.labels("commit").observe(time.perf_counter() - started)
        if change.new_attempt is not None:
            self._metrics.attempts.labels(change.new_attempt.runner).inc()
        if stored.state.terminal and not change.before.state.terminal:
            self._metrics.finished.labels(stored.state.value, stored.execution.value).inc()
        return stored


@dataclass(frozen=True)
class JournalRow:
    state: str
    execution: str
    reason: str
    count: int


class JournalCounts:
    """Operations in the journal by (state, execution, error reason): one GROUP BY,
    on a connection of its own, opened per scrape (nothing held between)."""

    def __init__(self, url: str) -> None:
        parsed = journal_url(url)
        if parsed.get_backend_name() == "sqlite":
            connect_args: dict[str, Any] = {"timeout": JOURNAL_QUERY_TIMEOUT_SECONDS}
        else:
            connect_args = {
                "connect_timeout": JOURNAL_QUERY_TIMEOUT_SECONDS,
                "options": f"-c statement_timeout={JOURNAL_QUERY_TIMEOUT_SECONDS * 1000}",
            }
        self._engine = sa.create_engine(parsed, poolclass=NullPool, connect_args=connect_args)
        table = operations.c
        self._query = sa.select(
            table.state, table.execution, table.error_reason, sa.func.count()
        ).group_by(table.state, table.execution, table.error_reason)

    def read(self) -> list[JournalRow]:
        with self._engine.connect() as connection:
            rows = connection.execute(self._query).all()
        return [JournalRow(str(s), str(e), _reason_label(r), int(n)) for s, e, r, n in rows]

    def close(self) -> None:
        self._engine.dispose()


@dataclass(frozen=True)
class SlotView:
    runner: str
    pool: str
    kind: str
    size: int
    in_use: int


@dataclass(frozen=True)
class MemoryView:
    """What the event loop knows, copied on the loop in one go."""

    counters: dict[str, int]
    slots: tuple[SlotView, ...]
    queued: dict[str, int]
    in_flight: dict[str, int]


def memory_view(dispatcher: Dispatcher) -> MemoryView:
    """Runs on the event loop (``read_on_loop``). Slots of the members now (§11 M5):
    a runner that left the set leaves these families at the next scrape."""
    scheduler = dispatcher.room.scheduler
    slots = tuple(
        SlotView(
            runner.name,
            runner.pool,
            kind.value,
            scheduler.size(runner.name, kind),
            scheduler.in_use(runner.name, kind),
        )
        for runner in dispatcher.runners
        if scheduler.known(runner.name)  # sizes come from its GetRunnerInfo
        for kind in TurnKind
        if kind in runner.kinds
    )
    occupancy = dispatcher.room.occupancy
    return MemoryView(
        counters={
            attribute: getattr(dispatcher.metrics, attribute)
            for attribute, *_ in DISPATCHER_COUNTERS
        },
        slots=slots,
        queued=dict(occupancy.queued),
        in_flight=dict(occupancy.in_flight),
    )


@dataclass(eq=False)  # registered in a registry: hashed by identity
class CoordinatorState(Collector):
    """The families read at scrape time (a custom collector: gauges of what is true now,
    and counters the dispatcher keeps itself)."""

    counts: JournalCounts | None
    dispatcher: Dispatcher | None = None
    loop: asyncio.AbstractEventLoop | None = None
    journal_failures: int = field(default=0)

    def describe(self) -> Iterator[Metric]:
        yield from self._journal_families([], readable=True)
        yield from self._memory_families(None)

    def collect(self) -> Iterator[Metric]:
        rows: list[JournalRow] = []
        readable = self.counts is not None
        if self.counts is not None:
            try:
                rows = self.counts.read()
            except Exception as exc:  # a scrape must answer; the failure is counted and logged
                readable = False
                self.journal_failures += 1
                log.warning("metrics: could not count the journal's operations: %s", exc)
        yield from self._journal_families(rows, readable)
        view = None
        if self.dispatcher is not None and self.loop is not None:
            dispatcher = self.dispatcher
            view = read_on_loop(self.loop, lambda: memory_view(dispatcher))
        yield from self._memory_families(view)

    def _journal_families(self, rows: list[JournalRow], readable: bool) -> Iterator[Metric]:
        by_state = GaugeMetricFamily(
            "turnwire_operations",
            "Operations in the journal by state and execution (every pair, zeros included).",
            labels=["state", "execution"],
        )
        # Zeros only for a journal that was read: an unreadable one shows no figures
        # at all (turnwire_journal_readable 0), never a false "nothing there".
        totals: dict[tuple[str, str], int] = (
            {(s.value, e.value): 0 for s in OpState for e in Execution} if readable else {}
        )
        unknown: dict[tuple[str, str], int] = {}
        for row in rows:
            totals[(row.state, row.execution)] = (
                totals.get((row.state, row.execution), 0) + row.count
            )
            if row.execution == Execution.UNKNOWN.value:
                key = (row.state, row.reason)
                unknown[key] = unknown.get(key, 0) + row.count
        for (state, execution), count in sorted(totals.items()):
            by_state.add_metric([state, execution], count)
        yield by_state
        ambiguous = GaugeMetricFamily(
            "turnwire_operations_unknown",
            "Operations whose execution is UNKNOWN (it may or may not have run), by state and "
            "error reason (NONE while still being reconciled).",
            labels=["state", "reason"],
        )
        for (state, reason), count in sorted(unknown.items()):
            ambiguous.add_metric([state, reason], count)
        yield ambiguous
        yield GaugeMetricFamily(
            "turnwire_journal_readable",
            "1 if this scrape could count the journal's operations, else 0 (the counts "
            "above are then missing, not zero).",
            value=1 if readable else 0,
        )
        yield CounterMetricFamily(
            "turnwire_journal_read_failures_total",
            "Scrapes that could not count the journal's operations.",
            value=self.journal_failures,
        )

    def _memory_families(self, view: MemoryView | None) -> Iterator[Metric]:
        for attribute, name, documentation in DISPATCHER_COUNTERS:
            family = CounterMetricFamily(name.removesuffix("_total"), documentation)
            if view is not None:
                family.add_metric([], view.counters[attribute])
            yield family
        labels = ["runner", "pool", "kind"]
        slots = GaugeMetricFamily(
            "turnwire_scheduler_runner_slots",
            "Each runner's slots by pool and kind, as its GetRunnerInfo told this coordinator.",
            labels=labels,
        )
        in_use = GaugeMetricFamily(
            "turnwire_scheduler_runner_slots_in_use",
            "Slots in use on each runner as this coordinator knows it (the larger of its own "
            "count and the runner's last report).",
            labels=labels,
        )
        queued = GaugeMetricFamily(
            "turnwire_queue_depth",
            "Turns waiting QUEUED for a slot, per principal (what --quota max_queued compares).",
            labels=["principal"],
        )
        in_flight = GaugeMetricFamily(
            "turnwire_turns_in_flight",
            "Turns accepted and not yet terminal, per principal (QUEUED included).",
            labels=["principal"],
        )
        if view is not None:
            for slot in view.slots:
                slots.add_metric([slot.runner, slot.pool, slot.kind], slot.size)
                in_use.add_metric([slot.runner, slot.pool, slot.kind], slot.in_use)
            # A principal with turns in flight and none waiting shows 0, not nothing.
            for principal in sorted(view.queued.keys() | view.in_flight.keys()):
                queued.add_metric([principal], view.queued.get(principal, 0))
            for principal, count in sorted(view.in_flight.items()):
                in_flight.add_metric([principal], count)
        yield from (slots, in_use, queued, in_flight)

    def close(self) -> None:
        if self.counts is not None:
            self.counts.close()
