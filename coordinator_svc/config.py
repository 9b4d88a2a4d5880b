"""Coordinator configuration values (parsed by the CLI, used by the shell)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from coordinator_svc.core.model import TurnKind
from coordinator_svc.core.quotas import PrincipalLimits
from coordinator_svc.retention_flags import JournalRetention
from turnwire.limits import MessageLimits
from turnwire.transport_security import RunnerCredentials, TlsMaterial

ALL_KINDS: frozenset[TurnKind] = frozenset({TurnKind.WRITABLE, TurnKind.READ_ONLY})
MAX_RUNNER_FIELD_CHARS = 255

# §12 S5: chunk bytes the output relay holds per watched operation by default.
DEFAULT_RELAY_BUFFER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class RunnerEndpoint:
    """One runner member: a stable name, where it listens, what it serves.

    ``generation`` tells members of one name apart (PROTOCOL.md §11 M1): the
    number of the journal record that added this member (0 where no journal
    keeps the set). A name removed and added again is a new member.
    """

    name: str
    address: str
    pool: str = "default"
    kinds: frozenset[TurnKind] = ALL_KINDS
    generation: int = 0

    def same_fields(self, other: RunnerEndpoint) -> bool:
        """Address, pool and kinds agree (whatever the generations)."""
        return (self.address, self.pool, self.kinds) == (other.address, other.pool, other.kinds)


class RunnerSpecError(ValueError):
    """A runner's name, address, pool or kinds that cannot be used; ``field`` names which."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _check_text(field: str, value: str, forbidden: str) -> None:
    if not value or len(value) > MAX_RUNNER_FIELD_CHARS:
        raise RunnerSpecError(field, f"{field} is required (1..{MAX_RUNNER_FIELD_CHARS} chars)")
    if not value.isprintable() or any(c.isspace() or c in forbidden for c in value):
        raise RunnerSpecError(
            field, f"{field} {value!r} may not hold spaces, control characters or {forbidden!r}"
        )


def parse_kinds(text: str, field: str = "kinds") -> frozenset[TurnKind]:
    """``writable+read_only`` (any case, ``+`` or ``,`` between) -> the kinds."""
    names = [k.strip().upper().replace("-", "_") for k in re.split(r"[+,]", text) if k.strip()]
    try:
        kinds = frozenset(TurnKind(name) for name in names)
    except ValueError:
        kinds = frozenset()
    if not kinds:
        raise RunnerSpecError(field, f"{field} must be writable and/or read_only, got {text!r}")
    return kinds


def runner_endpoint(
    name: str, address: str, pool: str = "default", kinds: frozenset[TurnKind] = ALL_KINDS
) -> RunnerEndpoint:
    """A runner member's fields, checked alike for --runner and AddRunner (§11 M2):
    a name, a HOST:PORT address, a pool, at least one kind. RunnerSpecError names
    the field. Whether plaintext may reach the address is the transport rule's
    (``turnwire.transport_security``), not this."""
    _check_text("name", name, "=;,")
    _check_text("address", address, ";,")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RunnerSpecError(
            "address", f"address must be HOST:PORT (port 1..65535), got {address!r}"
        )
    _check_text("pool", pool, ";,")
    if not kinds or not kinds <= ALL_KINDS:
        raise RunnerSpecError("kinds", "kinds must be writable and/or read_only")
    return RunnerEndpoint(name=name, address=address, pool=pool, kinds=frozenset(kinds))


def parse_runner_spec(spec: str) -> RunnerEndpoint:
    """``NAME=HOST:PORT[;pool=P][;kinds=writable+read_only]`` -> RunnerEndpoint."""
    head, *options = spec.split(";")
    name, sep, address = head.partition("=")
    if not sep or not name or ":" not in address:
        raise ValueError(f"runner spec must be NAME=HOST:PORT[;pool=P][;kinds=K+K], got {spec!r}")
    pool = "default"
    kinds = ALL_KINDS
    for option in options:
        key, _, value = option.partition("=")
        if key == "pool" and value:
            pool = value
        elif key == "kinds" and value:
            try:
                kinds = parse_kinds(value)
            except RunnerSpecError as exc:
                raise ValueError(f"runner {name}: kinds must be writable and/or read_only") from exc
        else:
            raise ValueError(f"runner {name}: unknown option {option!r}")
    try:
        return runner_endpoint(name, address, pool, kinds)
    except RunnerSpecError as exc:
        raise ValueError(f"runner spec {spec!r}: {exc}") from exc


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
    # The same poll while a live watch stream follows the operation's bound
    # incarnation (C9a): the stream replays from its cursor after any break,
    # so the poll is only a guard against a bug, and at 10 s it was most of
    # an idle coordinator's CPU with 10,000 turns in flight (issue 27).
    watched_status_poll: float = 300.0
    # How long an accepted-but-unsettled Dispatch reply waits for the watch
    # stream to report a result, so a fast turn goes DISPATCHING -> terminal in
    # one commit instead of two (the happy path's 3-commit shape).
    settle_grace: float = 0.05
    # After that, how long an accepted reply whose start the runner has not
    # confirmed yet waits for the watch stream to report the confirmed start,
    # so the RUNNING commit records execution STARTED (R3) instead of a later
    # commit of its own. Ends at once when the start or a result is reported.
    start_grace: float = 0.5
    # C2a: a never-sent first attempt skips its preflight only if the runner's
    # live watch delivered something this recently (driver.runners.LIVE_WITHIN).
    live_within: float = 0.5


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
    # §12 S5: chunk bytes the output relay holds per watched operation.
    stream_relay_buffer_bytes: int = DEFAULT_RELAY_BUFFER_BYTES
    # Issue 13: where the operator's web console listens (None: off). Plaintext
    # only on loopback; with ``tls`` it serves HTTPS (coordinator_svc/console).
    console_listen: str | None = None
    # Issue 13: where /metrics is served (None: off; turnwire/observability/metrics_http.py)
    # and a file to write its bound address to.
    metrics_listen: str | None = None
    metrics_address_file: str | None = None
