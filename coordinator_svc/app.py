"""The coordinator's composition root: journal + dispatcher + TurnService.

Start order (each step only after the one before succeeded):

1. read the tokens file (a bad file stops start-up before anything opens);
2. make sure the listen port is free (before recovery touches the journal:
   a second coordinator started by mistake on a taken port must not run
   C12 recovery against the first one's journal);
3. open the journal (refuses an unmigrated or too-new schema); a SQLite
   journal is then locked for this process (a second coordinator on it is
   refused: ``storage/journal_lock.py``);
4. start the dispatcher: C12 recovery runs here, before any new work (on a
   shared PostgreSQL journal: this replica's first lease; it adopts the
   operations of replicas whose leases lapsed as it finds them, §5);
5. serve TurnService with health and reflection; report the address;
6. with ``console_listen``, serve the operator's console (coordinator_svc/console).

Stop order is the reverse: health NOT_SERVING, end open watches, stop
accepting calls (in-flight ones get ``grace`` seconds), stop the dispatcher,
close the journal. A failure half-way through start undoes what was started.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

import grpc

from coordinator_svc.api.admin_servicer import SERVICE_NAME as ADMIN_SERVICE_NAME
from coordinator_svc.api.admin_servicer import AdminServicer, OperatorJournal, annotate
from coordinator_svc.api.admin_servicer import add_to_server as add_admin_to_server
from coordinator_svc.api.auth import RELOAD_POLL_SECONDS, Authenticator
from coordinator_svc.api.call_limits import CallLimits
from coordinator_svc.api.runner_set import follow_runner_set, load_runner_set
from coordinator_svc.api.servicer import SERVICE_NAME, TurnServicer, add_to_server, utc_now
from coordinator_svc.config import CoordinatorConfig
from coordinator_svc.console import RunningConsole, check_console_address, start_console
from coordinator_svc.core.quotas import Quotas
from coordinator_svc.dispatcher import Dispatcher
from coordinator_svc.dispatcher.output_relay import OutputRelay
from coordinator_svc.dispatcher.ownership import Ownership, ReplicaSettings
from coordinator_svc.feed import ChangeFeed
from coordinator_svc.metrics import CoordinatorMetrics
from coordinator_svc.ports import AdminJournal, Journal, LeasingJournal
from coordinator_svc.replica_flags import default_replica_id
from coordinator_svc.storage import open_journal
from coordinator_svc.storage.cached import CachedJournal
from coordinator_svc.storage.journal_lock import JournalLock, lock_journal
from coordinator_svc.storage.notifications import ChangeListener
from coordinator_svc.storage.retention import JournalRetentionTask
from turnwire.coordinator.v1.coordinator_pb2 import Operation
from turnwire.observability.metrics_http import (
    MetricsEndpoint,
    check_metrics_listen,
    start_metrics_endpoint,
)
from turnwire.secure_channels import server_credentials
from turnwire.serving import (
    DEFAULT_PENDING_CALLS,
    RunningServer,
    ensure_port_free,
    start_server,
)
from turnwire.transport_security import SecurityConfigError, require_loopback_for_plaintext

log = logging.getLogger("coordinator_svc")

DEFAULT_GRACE_SECONDS = 5.0


@dataclass
class RunningCoordinator:
    """A started coordinator. ``stop()`` is idempotent."""

    address: str
    journal: Journal
    dispatcher: Dispatcher
    feed: ChangeFeed
    servicer: TurnServicer
    server: RunningServer
    config: CoordinatorConfig
    authenticator: Authenticator
    _token_follower: asyncio.Task[None] | None = None
    _stopped: bool = False
    journal_lock: JournalLock | None = None
    listener: ChangeListener | None = None
    retention: JournalRetentionTask | None = None  # §9 K1, the scheduled pruning
    admin: AdminServicer | None = None  # AdminService (§10), when the journal keeps its records
    # A replica re-reads the runner set and the drains (§11 M5, §10 V8).
    runner_set_follower: asyncio.Task[None] | None = None
    metrics: MetricsEndpoint | None = None  # issue 13, --metrics-listen
    instruments: CoordinatorMetrics | None = None  # what /metrics serves
    console: RunningConsole | None = None  # issue 13, --console-listen

    def follow_tokens_file(self, poll_seconds: float = RELOAD_POLL_SECONDS) -> None:
        """Reload the tokens file whenever it changes (issue 11), until stop()."""
        if self._token_follower is None:
            self._token_follower = asyncio.create_task(self.authenticator.follow(poll_seconds))

    def reload_tokens(self) -> bool:
        """SIGHUP: read the tokens file now (False: it could not be used; the old stay)."""
        return self.authenticator.reload()

    async def stop(self, grace: float = DEFAULT_GRACE_SECONDS) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._token_follower is not None:
            self._token_follower.cancel()
        if self.runner_set_follower is not None:
            self.runner_set_follower.cancel()
        if self.metrics is not None:  # first: a scrape never reads a stopping process
            await asyncio.to_thread(self.metrics.stop)
        if self.instruments is not None:
            self.instruments.close()
        if self.console is not None:
            await asyncio.to_thread(self.console.stop)
        if self.listener is not None:
            await asyncio.to_thread(self.listener.stop)
        try:
            if self.retention is not None:
                await self.retention.stop()  # ends after its batch in progress
            await self.server.set_serving(False)
            self.servicer.close()
            await self.server.stop(grace)
            if self.servicer.relay is not None:  # §12: its upstreams end with the watches
                self.servicer.relay.close()
            await self.dispatcher.stop()
        finally:
            try:
                await self.journal.close()
            finally:
                if self.journal_lock is not None:
                    self.journal_lock.release()
        log.info("coordinator stopped")


@dataclass(frozen=True)
class _Wiring:
    """What start_coordinator was given, passed to the steps that use it."""

    config: CoordinatorConfig
    authenticator: Authenticator
    interceptors: tuple[grpc.aio.ClientInterceptor, ...]
    server_interceptors: tuple[grpc.aio.ServerInterceptor, ...]
    clock: Callable[[], datetime]
    metrics: CoordinatorMetrics | None = None


async def start_coordinator(
    config: CoordinatorConfig,
    *,
    interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
    server_interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    clock: Callable[[], datetime] = utc_now,
    journal: Journal | None = None,
) -> RunningCoordinator:
    """Start journal, dispatcher and TurnService per ``config``.

    ``interceptors`` wrap the dispatcher's calls to runners (fault injection
    in tests); ``server_interceptors`` wrap TurnService. ``journal`` lets a
    caller supply an already-open journal: the coordinator owns (and on stop
    closes) it once start succeeded; if start fails the caller still owns it.
    """
    authenticator = Authenticator.from_file(config.tokens_file)
    if not authenticator.principals:
        log.warning("no tokens configured: every TurnService call will be refused")
    check_transport_security(config)
    check_replica_config(config)
    ensure_port_free(config.listen)
    if config.metrics_listen is not None:
        ensure_port_free(config.metrics_listen)
    if config.console_listen is not None:
        ensure_port_free(config.console_listen)
    owned = journal is None
    # Issue 13: instruments only when /metrics is served (nothing on the hot path otherwise);
    # a journal handed in (a test's fake) has no URL to count operations in.
    metrics = (
        CoordinatorMetrics(config.journal_url if owned else None)
        if config.metrics_listen is not None
        else None
    )
    wiring = _Wiring(
        config,
        authenticator,
        (*interceptors, *((metrics.client_interceptor,) if metrics else ())),
        (*server_interceptors, *((metrics.server_interceptor,) if metrics else ())),
        clock,
        metrics,
    )
    journal = journal if journal is not None else open_journal(config.journal_url)
    lock: JournalLock | None = None
    try:
        lock = lock_journal(config.journal_url) if owned else None
        running = await _start_on(journal, wiring)
    except BaseException:
        if owned:
            await journal.close()
        if lock is not None:
            lock.release()
        raise
    running.journal_lock = lock
    if owned:  # a journal handed in (a test's fake) is not the URL's to prune
        cache = running.journal if isinstance(running.journal, CachedJournal) else None
        running.retention = JournalRetentionTask.started(
            config.journal_url, config.retention, wiring.clock, cache.forget if cache else None
        )
    if config.console_listen is not None:
        try:
            running.console = start_console(
                config.console_listen, running.address, authenticator, config.tls
            )
        except BaseException:
            await running.stop()
            raise
    if metrics is not None and config.metrics_listen is not None:
        running.instruments = metrics
        try:
            running.metrics = start_metrics_endpoint(
                config.metrics_listen,
                metrics.registry,
                tls=config.tls,
                address_file=config.metrics_address_file,
            )
        except BaseException:
            await running.stop()
            raise
    log.info(
        "coordinator serving on %s (journal %s, %d runner(s))",
        running.address,
        _redacted(config.journal_url),
        len(running.dispatcher.runners),
    )
    return running


async def _start_on(journal: Journal, wiring: _Wiring) -> RunningCoordinator:
    """The dispatcher, the server, then C12 recovery (reads are answered during
    it; what changes a turn waits for it); undo on failure."""
    config, feed = wiring.config, ChangeFeed()
    replica = replica_settings(config, journal)
    shared = journal
    # What this process wrote last is served from memory (storage/cached.py):
    # the dispatcher's reads are of operations it owns (the compare-and-set
    # catches any other writer). On a shared journal the public API reads the
    # database, so it sees what the other replicas wrote.
    journal = wiring.metrics.journal(journal) if wiring.metrics else CachedJournal(journal)
    ownership = None
    if replica is not None:
        if not isinstance(journal.inner, LeasingJournal):
            raise ValueError(f"{type(journal.inner).__name__} takes no leases: no replicas on it")
        ownership = Ownership(journal, replica, wiring.clock)
    # A journal that keeps the operator's records keeps the runner set too (§11):
    # the dispatcher starts empty and takes the journal's set (the flags weighed,
    # M8) before recovery; on any other journal the flags are the set.
    operator_journal = shared if isinstance(shared, AdminJournal) else None
    dispatcher = Dispatcher(
        journal,
        config.runners if operator_journal is None else (),
        config.timings,
        feed,
        clock=wiring.clock,
        default_max_attempts=config.default_max_attempts,
        interceptors=wiring.interceptors,
        limits=config.limits,
        quotas=Quotas(config.quota, dict(config.principal_quotas)),
        queue_timeout=config.queue_timeout,
        preflight_first_attempts=config.preflight_first_attempts,
        queue_before_first_attempt=config.queue_before_first_attempt,
        runner_credentials=config.runner_credentials,
        ownership=ownership,
    )
    # The runner set and its drains first (§11 M5, §10 V8): recovery and the
    # first grants already use them.
    if operator_journal is not None:
        await load_runner_set(
            operator_journal,
            dispatcher,
            config.runners,
            by=f"replica {replica.name}" if replica is not None else "the coordinator",
            clock=wiring.clock,
        )
        if dispatcher.runners and not dispatcher.can_add_runners():
            raise SecurityConfigError(
                f"the journal's runner set has {len(dispatcher.runners)} member(s) but this "
                "coordinator has no runner credentials: give --tls-cert/--tls-key/--tls-ca "
                "(mutual TLS), or --plaintext with --runner-secret-file (loopback only)"
            )
    # A replica on PostgreSQL hears the others' commits (0005's NOTIFY), so its
    # API may read through the cache like a lone coordinator's: a notification
    # drops an older copy; a watch whose poll ran out reads the journal itself.
    # Without notifications (a replica on the fake journal) it reads the journal.
    listening = ownership is not None and getattr(shared, "backend_name", "") == "postgresql"
    # The public API's journal (below); it keeps the operator's records when the
    # journal under it does (checked above), and then AdminService is served too.
    api_journal = journal if ownership is None or listening else shared

    async def notes(operations: Sequence[Operation]) -> None:
        await annotate(cast(AdminJournal, api_journal), operations)

    # §12: streamed output relayed to watchers, one upstream per operation here;
    # read through the API's journal, so a replica relays what it does not own (S8).
    relay = OutputRelay(
        source=dispatcher.output_source,
        locate=api_journal.get,
        feed=feed,
        buffer_bytes=config.stream_relay_buffer_bytes,
    )
    servicer = TurnServicer(
        relay=relay,
        notes=notes if operator_journal is not None else None,
        journal=journal if ownership is None or listening else shared,
        reread_on_poll=(lambda op_id: journal.forget([op_id])) if listening else None,
        dispatch=dispatcher,
        feed=feed,
        authenticator=wiring.authenticator,
        clock=wiring.clock,
        default_max_attempts=config.default_max_attempts,
        limits=config.limits,
        call_limits=CallLimits(config.call_limits),
        watch_poll_seconds=config.watch_poll_seconds,
        on_replay=wiring.metrics.submit_replays.inc if wiring.metrics is not None else None,
    )
    admin = (
        AdminServicer(
            journal=cast(OperatorJournal, api_journal),
            dispatch=dispatcher,
            feed=feed,
            authenticator=wiring.authenticator,
            call_limits=servicer.call_limits,
            clock=wiring.clock,
        )
        if operator_journal is not None
        else None
    )
    try:
        server = await start_server(
            config.listen,
            lambda s: _add_services(s, servicer, admin),
            [SERVICE_NAME] + ([ADMIN_SERVICE_NAME] if admin is not None else []),
            interceptors=wiring.server_interceptors,
            # SubmitTurn answers a turn too big for a runner's Dispatch with a typed
            # TURN_INVALID (acceptance); gRPC's own limit sits a little above so that
            # answer can be given instead of a bare RESOURCE_EXHAUSTED (turnwire.limits).
            options=(
                ("grpc.max_receive_message_length", config.limits.coordinator_max_receive_bytes),
            ),
            # A burst of streams must reach the call limits and be refused typed.
            pending_calls=pending_calls(config),
            # Issue 11: TLS for the public API when given; callers prove who they
            # are with bearer tokens, so no client certificate is asked for.
            credentials=(
                server_credentials(config.tls, require_client_cert=False)
                if config.tls is not None
                else None
            ),
        )
    except BaseException:
        await dispatcher.stop()
        raise
    # Recovery (C12) after the server is up: a restart answers reads at once,
    # however many turns are in flight; a submit or cancel waits for it.
    try:
        await dispatcher.start()
    except BaseException:
        await server.stop(0)
        await dispatcher.stop()
        raise
    running = RunningCoordinator(
        server.address, journal, dispatcher, feed, servicer, server, config, wiring.authenticator
    )
    if wiring.metrics is not None:
        wiring.metrics.watch(dispatcher, asyncio.get_running_loop())
    if listening:

        def changed(operation_id: str, version: int) -> None:
            journal.saw(operation_id, version)
            feed.publish(operation_id)

        running.listener = ChangeListener(
            config.journal_url, changed, journal.clear, asyncio.get_running_loop()
        )
        running.listener.start()
    running.admin = admin
    if operator_journal is not None and ownership is not None:
        running.runner_set_follower = asyncio.create_task(
            follow_runner_set(operator_journal, dispatcher)
        )
    if config.tokens_reload_seconds > 0:
        running.follow_tokens_file(config.tokens_reload_seconds)
    return running


def _add_services(
    server: grpc.aio.Server, servicer: TurnServicer, admin: AdminServicer | None
) -> None:
    """TurnService, and AdminService beside it on the same port (§10)."""
    add_to_server(servicer, server)
    if admin is not None:
        add_admin_to_server(admin, server)


def pending_calls(config: CoordinatorConfig) -> int:
    """How many arriving calls gRPC may hold for the servicer: room for a burst of
    four times the server-wide stream cap (never below the shared default)."""
    return max(DEFAULT_PENDING_CALLS, 4 * config.call_limits.streams_total)


def transport_security_rules(config: CoordinatorConfig) -> list[tuple[str, Callable[[], None]]]:
    """Issue 11, before anything opens: plaintext only on loopback, and runners only with
    the credentials they demand. Each rule raises (ValueError says what is missing);
    start-up stops at the first, ``serve --check-config`` runs them all."""
    rules: list[tuple[str, Callable[[], None]]] = []
    if config.tls is None:
        rules.append(
            (
                "listen address",
                lambda: require_loopback_for_plaintext(config.listen, "plaintext listen address"),
            )
        )
    metrics, console = config.metrics_listen, config.console_listen
    if metrics is not None:
        rules.append(("metrics address", lambda: check_metrics_listen(metrics, config.tls)))
    if console is not None:
        rules.append(("console address", lambda: check_console_address(console, config.tls)))
    if config.runners:
        rules.append(("runner credentials", lambda: _check_runner_credentials(config)))
    return rules


def check_transport_security(config: CoordinatorConfig) -> None:
    """Every rule of ``transport_security_rules``, stopping at the first broken one."""
    for _, rule in transport_security_rules(config):
        rule()


def _check_runner_credentials(config: CoordinatorConfig) -> None:
    if config.runner_credentials is None:
        raise SecurityConfigError(
            "runners are configured but the coordinator has no runner credentials: give "
            "--tls-cert/--tls-key/--tls-ca (mutual TLS), or --plaintext with "
            "--runner-secret-file (loopback only)"
        )


def check_replica_config(config: CoordinatorConfig) -> None:
    """Issue 12, before anything opens: a replica id only where replicas can be."""
    if config.replica_id is not None and _backend_of(config.journal_url) == "sqlite":
        raise ValueError(
            "--replica-id needs a PostgreSQL journal: a SQLite journal serves one "
            "coordinator (a second is refused); several replicas share PostgreSQL"
        )


def replica_settings(config: CoordinatorConfig, journal: Journal) -> ReplicaSettings | None:
    """This process as a replica: always on PostgreSQL (its id defaults to the
    host's name), on another journal only when an id was given (tests on the
    fake); None on SQLite."""
    backend = getattr(journal, "backend_name", "")
    if backend == "sqlite" or (backend != "postgresql" and config.replica_id is None):
        return None
    return ReplicaSettings(config.replica_id or default_replica_id(), ttl=config.lease_ttl)


def _backend_of(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).get_backend_name()
    except Exception:  # a malformed URL is refused when the journal opens
        return ""


def _redacted(url: str) -> str:
    """The journal URL without its password, for logs."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # a malformed URL was refused earlier; never log it raw
        return "<journal url>"
