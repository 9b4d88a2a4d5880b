"""The composition root: store + executor + service + gRPC server, and their teardown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from runner_svc.core.retention import key_window_seconds
from runner_svc.executor_sweep import end_earlier_executors
from runner_svc.executors import Executor
from runner_svc.executors.registry import ExecutorSet, load_executors
from runner_svc.metrics import MeteredRunnerService, MeteredRunnerStore, RunnerMetrics
from runner_svc.service import RunnerService, ServiceSettings
from runner_svc.storage.async_store import AsyncRunnerStore
from runner_svc.storage.retention import RunnerRetention, RunnerRetentionTask
from runner_svc.storage.sqlite_store import SqliteRunnerStore
from runner_svc.transport import edge
from runner_svc.transport.access import RunnerGate
from runner_svc.transport.servicer import SERVICE_NAME, RunnerServicer
from turnwire.ids import new_incarnation_id
from turnwire.limits import DEFAULT_RUNNER_MAX_RECEIVE_BYTES, MessageLimits
from turnwire.observability.metrics_http import (
    MetricsEndpoint,
    check_metrics_listen,
    start_metrics_endpoint,
)
from turnwire.output_stream import StreamLimits
from turnwire.secure_channels import server_credentials
from turnwire.serving import RunningServer, ensure_port_free, start_server
from turnwire.transport_security import RunnerAccess, require_loopback_for_plaintext

log = logging.getLogger("runner_svc.app")


@dataclass(frozen=True)
class RunnerConfig:
    store_path: Path
    # Who may call this runner (issue 11): mutual TLS or, on loopback, a shared
    # secret. None starts nothing: a runner never obeys anyone who can reach it.
    access: RunnerAccess | None = None
    listen: str = "127.0.0.1:0"
    writable_slots: int = 4
    read_only_slots: int = 4
    # The default executor's spec (None: no default executor), then more by
    # ``NAME=SPEC`` (runner_svc/executors/registry.py, R14).
    executor: str | None = "echo"
    executors: tuple[str, ...] = ()
    ledger_path: Path | None = None
    drain_seconds: float = 10.0
    address_file: Path | None = None
    # gRPC's max receive message length: the largest Dispatch this runner takes
    # (turnwire.limits; reported by GetRunnerInfo).
    max_receive_bytes: int = DEFAULT_RUNNER_MAX_RECEIVE_BYTES
    # §6.1 witness: how far the admission floor trails this runner's clock, and
    # how often it is raised (it trails by at most their sum, W2a).
    admission_window_seconds: float = 7.0
    floor_interval_seconds: float = 0.25
    # §9 K2-K4: how long released rows and tombstones, then their keys, are kept.
    retention: RunnerRetention = field(default_factory=RunnerRetention)
    # Issue 13: where /metrics is served (None: off) and a file for its bound address.
    metrics_listen: str | None = None
    metrics_address_file: Path | None = None
    # Streamed output (R13): its bounds and how long a settled turn's chunks stay.
    stream_limits: StreamLimits = field(default_factory=StreamLimits)
    stream_keep_seconds: float = 60.0


@dataclass
class RunningRunner:
    address: str
    incarnation_id: str
    store_id: str
    service: RunnerService
    server: RunningServer
    drain_seconds: float
    gate: RunnerGate
    _stopped: bool = False
    retention: RunnerRetentionTask | None = None
    metrics: MetricsEndpoint | None = None  # issue 13, --metrics-listen

    async def stop(self, drain: bool = True) -> None:
        """R8: close admission, drain (bounded), end watches, stop serving, close the store."""
        if self._stopped:
            return
        self._stopped = True
        log.info("incarnation %s stopping (drain=%s)", self.incarnation_id, drain)
        if self.metrics is not None:  # first: a scrape never reads a stopping runner
            await asyncio.to_thread(self.metrics.stop)
        if self.retention is not None:
            await self.retention.stop()  # after its batch in progress, before the store closes
        self.service.stop_admission()
        await self.server.set_serving(False)
        await self.service.drain(self.drain_seconds if drain else 0.0)
        self.service.end_watches()
        await self.server.stop(grace=1.0)
        await self.service.close()
        log.info("incarnation %s stopped", self.incarnation_id)


def config_rules(config: RunnerConfig) -> list[tuple[str, Callable[[], None]]]:
    """What start_runner refuses before it opens anything; each rule raises ValueError
    saying what is wrong. Start-up stops at the first, ``serve --check-config`` runs all."""
    access = config.access

    def who_may_call() -> None:
        if access is None:
            raise ValueError(
                "a runner serves only its coordinator: give it TLS material (mutual TLS) "
                "or a shared secret (plaintext, loopback only)"
            )

    def listen() -> None:
        if access is not None and access.tls is None:
            require_loopback_for_plaintext(config.listen, "plaintext listen address")

    def slots() -> None:
        if config.writable_slots < 0 or config.read_only_slots < 0:
            raise ValueError("slot counts cannot be negative")

    def message_limit() -> None:
        MessageLimits(config.max_receive_bytes)  # raises ValueError if too small to be useful

    rules = [
        ("who may call", who_may_call),
        ("listen address", listen),
        ("slots", slots),
        ("message limit", message_limit),
    ]
    metrics = config.metrics_listen
    if metrics is not None:
        tls = access.tls if access is not None else None
        rules.append(("metrics address", lambda: check_metrics_listen(metrics, tls)))
    return rules


def _write_address(path: Path, address: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(address + "\n")
    tmp.replace(path)  # atomic: a reader never sees half an address


async def start_runner(
    config: RunnerConfig,
    *,
    executor: Executor | None = None,
    settings: ServiceSettings | None = None,
) -> RunningRunner:
    """Open the store (lock, schema, ownership), then serve RunnerService on ``listen``.

    ``executor`` and ``settings`` override what the config would build (tests).
    """
    for _, rule in config_rules(config):  # before the store is opened: nothing to undo
        rule()
    assert config.access is not None  # config_rules refused None
    if config.metrics_listen is not None:  # issue 13: refused before anything opens
        ensure_port_free(config.metrics_listen)
    # Instruments only when /metrics is served: nothing on the hot path otherwise.
    metrics = RunnerMetrics() if config.metrics_listen is not None else None
    chosen = (
        ExecutorSet.single(executor)
        if executor is not None
        else load_executors(
            [*([config.executor] if config.executor else []), *config.executors],
            ledger_path=config.ledger_path,
        )
    )
    incarnation_id = new_incarnation_id()
    store = (MeteredRunnerStore if metrics else SqliteRunnerStore).open(
        Path(config.store_path), incarnation_id
    )
    if metrics is not None and isinstance(store, MeteredRunnerStore):
        store.commit_seconds = metrics.store_seconds
    try:  # R10: nothing an earlier incarnation launched runs on when this one serves
        await asyncio.to_thread(end_earlier_executors, store)
    except BaseException:
        store.close()
        raise
    settings = settings or ServiceSettings(
        writable_slots=config.writable_slots,
        read_only_slots=config.read_only_slots,
        admission_window_seconds=config.admission_window_seconds,
        floor_interval_seconds=config.floor_interval_seconds,
        stream_limits=config.stream_limits,
        stream_keep_seconds=config.stream_keep_seconds,
    )
    service = (MeteredRunnerService if metrics else RunnerService)(
        AsyncRunnerStore(store), chosen, settings
    )
    if metrics is not None and isinstance(service, MeteredRunnerService):
        service.dispatch_counter = metrics.dispatches
    servicer = RunnerServicer(service, max_receive_bytes=config.max_receive_bytes)

    def register(server: grpc.aio.Server) -> None:
        edge.add_to_server(servicer, server)

    gate = RunnerGate(config.access)
    try:
        server = await start_server(
            config.listen,
            register,
            [SERVICE_NAME],
            wrap_handlers=gate.wrap,
            interceptors=(metrics.server_interceptor,) if metrics else (),
            # A burst (say, of anonymous calls) reaches the gate and gets its typed
            # answer: start_server leaves room for it in gRPC's queue of waiting calls.
            options=(("grpc.max_receive_message_length", config.max_receive_bytes),),
            credentials=(
                server_credentials(config.access.tls, require_client_cert=True)
                if config.access.tls is not None
                else None
            ),
        )
    except BaseException:
        await service.close()
        raise
    endpoint = None
    if metrics is not None and config.metrics_listen is not None:
        metrics.watch(service, gate, asyncio.get_running_loop())
        try:
            endpoint = start_metrics_endpoint(
                config.metrics_listen,
                metrics.registry,
                tls=config.access.tls,
                address_file=config.metrics_address_file,
            )
        except BaseException:
            await server.stop(None)
            await service.close()
            raise
    service.start_floor_keeper()
    retention = RunnerRetentionTask.started(
        service.store,
        config.retention,
        window_seconds=key_window_seconds(settings.admission_window_seconds),
    )
    if config.address_file is not None:
        _write_address(Path(config.address_file), server.address)
    log.info(
        "runner incarnation %s serving on %s (%s; store %s, store_id %s, executors %s, "
        "slots %d/%d)",
        incarnation_id,
        server.address,
        "mutual TLS" if config.access.tls is not None else "plaintext, shared secret",
        config.store_path,
        store.store_id,
        chosen.describe(),
        settings.writable_slots,
        settings.read_only_slots,
    )
    return RunningRunner(
        server.address,
        incarnation_id,
        store.store_id,
        service,
        server,
        config.drain_seconds,
        gate,
        retention=retention,
        metrics=endpoint,
    )
