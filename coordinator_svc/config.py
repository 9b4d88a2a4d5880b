"""Coordinator configuration values (parsed by the CLI, used by the shell)."""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator_svc.core.model import TurnKind
from coordinator_svc.core.quotas import PrincipalLimits
from coordinator_svc.retention_flags import JournalRetention
from turnwire.limits import MessageLimits
from turnwire.transport_security import RunnerCredentials, TlsMaterial


@dataclass(frozen=True)
class RunnerEndpoint:
    """One configured runner: a stable name, where it listens, what it serves."""

    name: str
    address: str
    pool: str = "default"
    kinds: frozenset[TurnKind] = frozenset({TurnKind.WRITABLE, TurnKind.READ_ONLY})


def parse_runner_spec(spec: str) -> RunnerEndpoint:
    """``NAME=HOST:PORT[;pool=P][;kinds=writable+read_only]`` -> RunnerEndpoint."""
    head, *options = spec.split(";")
    name, sep, address = head.partition("=")
    if not sep or not name or ":" not in address:
        raise ValueError(f"runner spec must be NAME=HOST:PORT[;pool=P][;kinds=K+K], got {spec!r}")
    pool = "default"
    kinds = {TurnKind.WRITABLE, TurnKind.READ_ONLY}
    for option in options:
        key, _, value = option.partition("=")
        if key == "pool" and value:
            pool = value
        elif key == "kinds" and value:
            try:
                kinds = {TurnKind(k.strip().upper()) for k in value.split("+")}
            except ValueError as exc:
                raise ValueError(f"runner {name}: kinds must be writable and/or read_only") from exc
        else:
            raise ValueError(f"runner {name}: unknown option {option!r}")
    return RunnerEndpoint(name=name, address=address, pool=pool, kinds=frozenset(kinds))


@dataclass(frozen=True)
class DispatchTimings:
    """Deadlines and backoff for every coordinator -> runner call (seconds)."""

    preflight_timeout: float = 2.0
    dispatch_timeout: float = 5.0
    cancel_timeout: float = 2.0
    release_timeout: float = 2.0
    backoff_initial: float = 0.05
    backoff_max: float = 2.0
    # How long DISPATCH_UNKNOWN may wait for an unreachable runner (C8).
    reconcile_deadline: float = 30.0
    # How often the scheduler looks for due work when nothing woke it.
    idle_poll: float = 0.5
    # Fallback status poll of a RUNNING/CANCELLING operation, in case its
    # runner's watch stream is lost (the stream normally reports first).
    status_poll: float = 10.0
    # How long an accepted-but-unsettled Dispatch reply waits for the watch
    # stream to report a result, so a fast turn goes DISPATCHING -> terminal in
    # one commit instead of two (the happy path's 3-commit shape).
    settle_grace: float = 0.05
    # After that, how long an accepted reply whose start the runner has not
    # confirmed yet waits for the watch stream to report the confirmed start,
    # so the RUNNING commit records execution STARTED (R3) instead of a later
    # commit of its own. Ends at once when the start or a result is reported.
    start_grace: float = 0.5


@dataclass(frozen=True)
class CallLimitSettings:
    """Calls open at once (issue 11; coordinator_svc/api/call_limits.py)."""

    calls_per_principal: int = 64
    streams_per_principal: int = 32
    streams_total: int = 2000
    # What a refused caller is told to wait (RetryInfo) before trying again.
    retry_after_seconds: float = 1.0

    def __post_init__(self) -> None:
        for name in ("calls_per_principal", "streams_per_principal", "streams_total"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


@dataclass(frozen=True)
class CoordinatorConfig:
    listen: str = "127.0.0.1:0"
    journal_url: str = "sqlite:///data/journal.db"
    runners: tuple[RunnerEndpoint, ...] = ()
    tokens_file: str | None = None
    # Issue 11: how often a changed tokens file is noticed and reloaded (0: only on SIGHUP).
    tokens_reload_seconds: float = 2.0
    default_max_attempts: int = 5
    timings: DispatchTimings = field(default_factory=DispatchTimings)
    address_file: str | None = None
    # The message-size chain, from the runners' receive limit (turnwire.limits).
    limits: MessageLimits = field(default_factory=MessageLimits)
    # Scheduling (issue 9): every principal's limits and fair-share weight,
    # overrides per principal, and the default queue timeout (seconds).
    quota: PrincipalLimits = field(default_factory=PrincipalLimits)
    principal_quotas: tuple[tuple[str, PrincipalLimits], ...] = ()
    queue_timeout: float | None = None
    # C2a off: a status read before every first attempt as well (one more
    # round trip per turn; the preflight path's own tests use it).
    preflight_first_attempts: bool = False
    # Issue 10 off: every turn is stored QUEUED alone and its first attempt
    # written by a commit of its own (one more durable commit per turn).
    queue_before_first_attempt: bool = False
    # Issue 11. The public API's TLS certificate (None: plaintext, loopback
    # only); the same material is this coordinator's client certificate toward
    # runners when they are reached over mutual TLS.
    tls: TlsMaterial | None = None
    # What runners demand of this coordinator: required when runners are set.
    runner_credentials: RunnerCredentials | None = None
    # Calls open at once: per principal, and streams on the whole server.
    call_limits: CallLimitSettings = field(default_factory=CallLimitSettings)
    # Issue 12, §9 K1: how long finished operations (and their keys) are kept.
    retention: JournalRetention = field(default_factory=JournalRetention)
    # Issue 12, §5. This replica's id on a shared PostgreSQL journal (None:
    # the host's name there; a SQLite journal has one coordinator and no id),
    # and how long its leases last (about how long a crash's takeover takes).
    replica_id: str | None = None
    lease_ttl: float = 10.0
    # How often an open watch re-reads the journal when nothing woke it (a
    # commit here, or another replica's, heard through PostgreSQL NOTIFY).
    watch_poll_seconds: float = 1.0
    # Issue 13: where the operator's web console listens (None: off). Plaintext
    # only on loopback; with ``tls`` it serves HTTPS (coordinator_svc/console).
    console_listen: str | None = None
    # Issue 13: where /metrics is served (None: off; turnwire/observability/metrics_http.py)
    # and a file to write its bound address to.
    metrics_listen: str | None = None
    metrics_address_file: str | None = None
