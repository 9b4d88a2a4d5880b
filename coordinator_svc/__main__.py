"""``python -m coordinator_svc``: serve, migrate, manage tokens.

    python -m coordinator_svc serve   [--listen HOST:PORT] [--journal-url URL] [--runner SPEC]...
                                      (--tls-cert F --tls-key F --tls-ca F
                                       | --plaintext [--runner-secret-file F])
                                      [--tokens-file F] [--migrate] [timing flags] ...
    python -m coordinator_svc migrate [--journal-url URL]
    python -m coordinator_svc prune   [--journal-url URL] [--idempotency-horizon 24h] [--dry-run]
    python -m coordinator_svc tokens add --file F --principal P [--scope S]... [--expires-in 30d]

Every ``serve``/``migrate`` flag also reads an environment variable (shown in
``--help``); a flag on the command line wins. Exit codes: 0 clean stop, 1 the
coordinator could not start or run (journal, port), 2 bad flags or config.

Heavy imports (grpc, SQLAlchemy) happen inside the subcommands, so ``--help``
and bad flags answer at once.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import re
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from coordinator_svc.config import (
    DEFAULT_RELAY_BUFFER_BYTES,
    CoordinatorConfig,
    DispatchTimings,
    RunnerEndpoint,
    parse_runner_spec,
)
from coordinator_svc.core.quotas import PrincipalLimits
from coordinator_svc.migrate_cli import run_migrate
from coordinator_svc.prune_cli import add_prune_parser, run_prune
from coordinator_svc.replica_flags import add_replica_flags
from coordinator_svc.retention_flags import add_retention_flags, retention_from_args
from coordinator_svc.scheduling_flags import add_scheduling_flags, principal_limits
from coordinator_svc.security_flags import (
    add_limit_flags,
    add_security_flags,
    limits_from_args,
    security_from_args,
)
from coordinator_svc.timing_flags import add_timing_flags
from coordinator_svc.tokens_cli import add_tokens_parser, run_tokens_add
from turnwire import event_loop
from turnwire.distribution import add_version_flag, exit_unless_server_installed, invoked_as
from turnwire.limits import DEFAULT_RUNNER_MAX_RECEIVE_BYTES, MessageLimits, parse_byte_count
from turnwire.observability import tracing
from turnwire.observability.logs import add_log_format_flag, configure_logging
from turnwire.seconds import positive_seconds
from turnwire.transport_security import RunnerCredentials, TlsMaterial

SCRIPT = "turnwire-coordinator"
PROG = invoked_as(SCRIPT, "coordinator_svc")
DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_JOURNAL_URL = "sqlite:///./data/journal.db"
EXIT_FAILED = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """Bad flags: one line on stderr, exit 2 (no usage dump to scroll past)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _env(name: str, fallback: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else fallback


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _attempts(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise argparse.ArgumentTypeError(f"must be an integer 1..100, got {text!r}")
    return int(text)


def _runner(text: str) -> RunnerEndpoint:
    try:
        return parse_runner_spec(text.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _listen(text: str) -> str:
    if not re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.\-]+):\d{1,5}", text):
        raise argparse.ArgumentTypeError(f"must be HOST:PORT, got {text!r}")
    if int(text.rpartition(":")[2]) > 65535:
        raise argparse.ArgumentTypeError(f"port out of range in {text!r}")
    return text


def _journal_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--journal-url",
        default=_env("TURNWIRE_JOURNAL_URL", DEFAULT_JOURNAL_URL),
        help="sqlite:///PATH or postgresql://USER@HOST:PORT/DB "
        f"(env TURNWIRE_JOURNAL_URL; default {DEFAULT_JOURNAL_URL})",
    )


def _serve_parser(commands: argparse._SubParsersAction[_Parser]) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the coordinator",
        description="Run the coordinator: journal + dispatcher + TurnService (health and "
        "reflection included). Prints 'listening on HOST:PORT' once serving. "
        "SIGTERM or SIGINT: NOT_SERVING, drain, stop the dispatcher, close the journal, "
        "exit 0. Exit 1 if the journal is unmigrated/too new/unreachable or the port "
        "is taken; exit 2 for bad flags.",
    )
    _add_serve_flags(serve)
    serve.add_argument(
        "--check-config",
        action="store_true",
        help="check the flags, environment, files, certificates, tokens file and journal "
        "(reachable, at this code's schema), print every problem with its fix, and exit "
        "without serving: 0 all good, 2 problems (docs/DEPLOYMENT.md)",
    )
    health = commands.add_parser(
        "health",
        help="ask a running coordinator's gRPC health; exit 0 SERVING, 1 otherwise",
        description="Ask the coordinator that `serve` with these same flags runs (at "
        "--listen, or the address in --address-file; 0.0.0.0 and :: mean this host's "
        "loopback) for its grpc.health.v1 status, over TLS trusting --tls-ca or in "
        "plaintext; print it; exit 0 when SERVING, 1 otherwise. It takes every serve "
        "flag, so a container's health check can be given the service's own command "
        "line; it uses only the address and transport security flags.",
    )
    _add_serve_flags(health)
    health.add_argument(
        "--timeout", type=positive_seconds, default=5.0, help="seconds to wait (default 5)"
    )


def _add_serve_flags(serve: argparse.ArgumentParser) -> None:
    _serve_wiring_flags(serve)
    add_security_flags(serve)
    add_limit_flags(serve)
    _serve_behaviour_flags(serve)
    add_scheduling_flags(serve)
    add_replica_flags(serve)
    add_retention_flags(serve)
    add_timing_flags(serve)


def _serve_wiring_flags(serve: argparse.ArgumentParser) -> None:
    """Where to listen, which journal, which runners, whose tokens."""
    serve.add_argument(
        "--listen",
        type=_listen,
        default=_env("TURNWIRE_COORDINATOR_LISTEN", DEFAULT_LISTEN),
        help="HOST:PORT; port 0 picks a free one and prints it "
        f"(env TURNWIRE_COORDINATOR_LISTEN; default {DEFAULT_LISTEN})",
    )
    serve.add_argument(
        "--address-file",
        default=_env("TURNWIRE_COORDINATOR_ADDRESS_FILE"),
        help="also write the bound address here once listening "
        "(env TURNWIRE_COORDINATOR_ADDRESS_FILE)",
    )
    _journal_flag(serve)
    _metrics_flags(serve)
    serve.add_argument(
        "--runner",
        dest="runners",
        action="append",
        type=_runner,
        metavar="NAME=HOST:PORT[;pool=P][;kinds=writable+read_only]",
        help="a runner of the initial set; repeatable. The set lives in the journal: a name "
        "it has never seen is recorded, one it holds must agree with it (else the start is "
        "refused), a removed one is not added back; change it while running with "
        "`turnwire admin runners add|drain|remove` (PROTOCOL.md §11) "
        "(env TURNWIRE_RUNNERS: specs separated by commas or newlines)",
    )
    serve.add_argument(
        "--tokens-file",
        default=_env("TURNWIRE_TOKENS_FILE"),
        help="lines '<principal> <sha256 hex of token> [scopes=...] [expires=...]' (see "
        "`tokens add`), re-read when it changes or on SIGHUP; without one every call is "
        "refused (env TURNWIRE_TOKENS_FILE)",
    )
    serve.add_argument(
        "--console-listen",
        type=_listen,
        default=_env("TURNWIRE_CONSOLE_LISTEN"),
        metavar="HOST:PORT",
        help="also serve the operator's web console here (docs/CONSOLE.md; sign in with an "
        "admin token); plaintext HTTP only on a loopback address, HTTPS with the --tls-* "
        "flags; port 0 picks a free one and prints it (env TURNWIRE_CONSOLE_LISTEN; "
        "default: off)",
    )
    serve.add_argument(
        "--tokens-reload-seconds",
        type=_non_negative_float,
        default=_env("TURNWIRE_TOKENS_RELOAD_SECONDS", "2"),
        help="how often to look for a changed tokens file and reload it (0: only on SIGHUP; "
        "env TURNWIRE_TOKENS_RELOAD_SECONDS; default 2)",
    )


def _metrics_flags(serve: argparse.ArgumentParser) -> None:
    """Issue 13: Prometheus metrics (docs/METRICS.md)."""
    from turnwire.observability.metrics_http import add_metrics_arguments

    add_metrics_arguments(
        serve,
        env_prefix="TURNWIRE_",
        listen_default=_env("TURNWIRE_METRICS_LISTEN"),
        address_file_default=_env("TURNWIRE_METRICS_ADDRESS_FILE"),
    )


def _serve_behaviour_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--migrate",
        action="store_true",
        default=_env("TURNWIRE_MIGRATE") in ("1", "true", "yes"),
        help="upgrade the journal schema before starting (env TURNWIRE_MIGRATE=1)",
    )
    serve.add_argument(
        "--preflight-first-attempts",
        action="store_true",
        default=_env("TURNWIRE_PREFLIGHT_FIRST_ATTEMPTS") in ("1", "true", "yes"),
        help="ask the runner for the turn's status before its first Dispatch too, even when "
        "the runner's live watch already says who it is (PROTOCOL C2a): one more round trip "
        "per turn (env TURNWIRE_PREFLIGHT_FIRST_ATTEMPTS=1)",
    )
    serve.add_argument(
        "--queue-before-first-attempt",
        action="store_true",
        default=_env("TURNWIRE_QUEUE_BEFORE_FIRST_ATTEMPT") in ("1", "true", "yes"),
        help="store every accepted turn QUEUED in a commit of its own and write its first "
        "attempt in the next, instead of writing the attempt with the acceptance when the "
        "turn can be sent at once (PROTOCOL C1): one more durable commit per turn "
        "(env TURNWIRE_QUEUE_BEFORE_FIRST_ATTEMPT=1)",
    )
    serve.add_argument(
        "--default-max-attempts",
        type=_attempts,
        default=_env("TURNWIRE_DEFAULT_MAX_ATTEMPTS", "5"),
        help="attempts for a turn that sets max_attempts 0 "
        "(env TURNWIRE_DEFAULT_MAX_ATTEMPTS; default 5)",
    )
    serve.add_argument(
        "--runner-max-receive-bytes",
        type=parse_byte_count,
        default=_env("TURNWIRE_RUNNER_MAX_RECEIVE_BYTES", str(DEFAULT_RUNNER_MAX_RECEIVE_BYTES)),
        help="the runners' receive limit (e.g. 4194304, 4M), the same value each runner gets as "
        "--max-receive-bytes; the largest envelope SubmitTurn accepts and every Dispatch "
        "are sized from it (README, message limits) (env TURNWIRE_RUNNER_MAX_RECEIVE_BYTES; "
        f"default {DEFAULT_RUNNER_MAX_RECEIVE_BYTES})",
    )
    serve.add_argument(
        "--stream-relay-buffer-bytes",
        type=_positive_byte_count,
        default=_env("TURNWIRE_STREAM_RELAY_BUFFER_BYTES", str(DEFAULT_RELAY_BUFFER_BYTES)),
        help="streamed output (PROTOCOL.md §12): the chunk bytes held per watched operation "
        "for the clients watching it; past it the oldest are dropped and a watcher that had "
        "not read them is told a gap (env TURNWIRE_STREAM_RELAY_BUFFER_BYTES; default "
        f"{DEFAULT_RELAY_BUFFER_BYTES})",
    )
    serve.add_argument(
        "--shutdown-grace",
        type=positive_seconds,
        default=_env("TURNWIRE_SHUTDOWN_GRACE", "5"),
        help="seconds in-flight calls get on SIGTERM (env TURNWIRE_SHUTDOWN_GRACE; default 5)",
    )
    serve.add_argument(
        "--log-level",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        type=str.upper,
        default=_env("TURNWIRE_LOG_LEVEL", "INFO"),
        help="the least to log (env TURNWIRE_LOG_LEVEL; default INFO)",
    )
    add_log_format_flag(serve, "TURNWIRE_LOG_FORMAT")
    tracing.add_endpoint_flag(serve, "TURNWIRE_OTEL_ENDPOINT")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_version_flag(parser, SCRIPT)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _serve_parser(commands)
    migrate = commands.add_parser(
        "migrate",
        help="upgrade the journal schema to this code's",
        description="Upgrade the journal schema to this code's head revision (creating it "
        "if empty) and print 'journal schema: FROM -> TO'.",
    )
    _journal_flag(migrate)
    add_tokens_parser(commands)
    add_prune_parser(commands, _journal_flag)
    return parser


def _runners_from_env() -> list[RunnerEndpoint]:
    text = _env("TURNWIRE_RUNNERS", "") or ""
    return [parse_runner_spec(s.strip()) for s in re.split(r"[,\n]", text) if s.strip()]


def runners_from_args(args: argparse.Namespace) -> list[RunnerEndpoint]:
    """--runner, else TURNWIRE_RUNNERS; ValueError for a bad spec or a repeated name."""
    runners = args.runners if args.runners else _runners_from_env()
    names = [r.name for r in runners]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"runner names must be unique, repeated: {', '.join(duplicates)}")
    return list(runners)


def principal_quotas_from_args(args: argparse.Namespace) -> list[tuple[str, PrincipalLimits]]:
    """--principal-quota, else TURNWIRE_PRINCIPAL_QUOTAS (one spec a line)."""
    try:
        return args.principal_quotas or [
            principal_limits(line.strip())
            for line in (_env("TURNWIRE_PRINCIPAL_QUOTAS", "") or "").splitlines()
            if line.strip()
        ]
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"TURNWIRE_PRINCIPAL_QUOTAS: {exc}") from None


def config_from_args(args: argparse.Namespace) -> CoordinatorConfig:
    """Raises ValueError for a config that parsed but does not hold together."""
    runners = runners_from_args(args)
    principal_quotas = principal_quotas_from_args(args)
    tls, runner_credentials = security_from_args(args, has_runners=bool(runners))
    return config_from_parts(args, runners, principal_quotas, tls, runner_credentials)


def config_from_parts(
    args: argparse.Namespace,
    runners: Sequence[RunnerEndpoint],
    principal_quotas: Sequence[tuple[str, PrincipalLimits]],
    tls: TlsMaterial | None,
    runner_credentials: RunnerCredentials | None,
) -> CoordinatorConfig:
    """The config from ``args`` and the parts config_from_args checked one by one."""
    timings = DispatchTimings(
        **{
            f.name: getattr(args, f.name)
            for f in dataclasses.fields(DispatchTimings)
            if hasattr(args, f.name)
        }
    )
    return CoordinatorConfig(
        tls=tls,
        runner_credentials=runner_credentials,
        call_limits=limits_from_args(args),
        quota=args.quota or PrincipalLimits(),
        principal_quotas=tuple(principal_quotas),
        queue_timeout=args.queue_timeout,
        preflight_first_attempts=args.preflight_first_attempts,
        queue_before_first_attempt=args.queue_before_first_attempt,
        listen=args.listen,
        journal_url=args.journal_url,
        runners=tuple(runners),
        tokens_file=args.tokens_file,
        tokens_reload_seconds=args.tokens_reload_seconds,
        default_max_attempts=args.default_max_attempts,
        limits=MessageLimits(args.runner_max_receive_bytes),
        timings=timings,
        address_file=args.address_file,
        retention=retention_from_args(args),
        replica_id=args.replica_id,
        lease_ttl=float(args.lease_ttl),
        watch_poll_seconds=float(args.watch_poll_seconds),
        stream_relay_buffer_bytes=args.stream_relay_buffer_bytes,
        console_listen=args.console_listen,
        metrics_listen=args.metrics_listen,
        metrics_address_file=args.metrics_address_file,
    )


def _positive_byte_count(text: str) -> int:
    count = parse_byte_count(text)
    if count <= 0:
        raise ValueError(f"must be at least one byte, got {text!r}")
    return count


def _fail(code: int, message: str) -> int:
    one_line = " ".join(message.split())  # driver errors span lines; keep it greppable
    print(f"{PROG}: error: {one_line}", file=sys.stderr, flush=True)
    return code


def _sqlite_dir(url: str) -> None:
    """Create the directory of a SQLite journal file (``./data`` by default)."""
    from sqlalchemy.exc import ArgumentError

    from coordinator_svc.storage.backends import SqliteBackend
    from coordinator_svc.storage.schema import journal_url

    try:
        parsed = journal_url(url)
    except ArgumentError as exc:
        raise ValueError(f"invalid journal URL: {exc}") from None
    if parsed.get_backend_name() == "sqlite":
        path = SqliteBackend.database_file(parsed)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)


async def _serve_until_signalled(config: CoordinatorConfig, grace: float) -> int:
    from coordinator_svc.app import start_coordinator
    from turnwire.serving import announce

    running = await start_coordinator(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # SIGHUP: read the tokens file now (it is also re-read whenever it changes).
    loop.add_signal_handler(signal.SIGHUP, running.reload_tokens)
    try:
        announce(running.address, config.address_file)
        if running.console is not None:
            print(f"console on {running.console.url}", flush=True)
        if running.metrics is not None:
            print(f"metrics on {running.metrics.url}", flush=True)
        await stop.wait()
        logging.getLogger("coordinator_svc").info("signal received; shutting down")
    finally:
        await running.stop(grace)
    return 0


def _serve(args: argparse.Namespace) -> int:
    if args.check_config:
        from coordinator_svc.check_config import ArgsReaders, run_check_config

        readers = ArgsReaders(runners_from_args, principal_quotas_from_args, config_from_parts)
        return run_check_config(args, build_parser(), PROG, readers)
    from coordinator_svc.api.auth import Authenticator, TokensFileError
    from coordinator_svc.app import check_replica_config, check_transport_security
    from coordinator_svc.ports import JournalError
    from coordinator_svc.storage import migrate
    from turnwire.distribution import MissingPackageData
    from turnwire.serving import AddressInUseError

    configure_logging(args.log_level, args.log_format)
    try:
        config = config_from_args(args)
        check_transport_security(config)
        check_replica_config(config)
        Authenticator.from_file(config.tokens_file)  # a bad file fails before anything changes
        _sqlite_dir(config.journal_url)
    except (ValueError, TokensFileError) as exc:
        return _fail(EXIT_USAGE, str(exc))
    except OSError as exc:
        return _fail(EXIT_FAILED, f"cannot create the journal directory: {exc}")
    if args.migrate:
        try:
            migrate(config.journal_url)
        except Exception as exc:  # alembic and drivers raise many kinds; all mean "not migrated"
            return _fail(EXIT_FAILED, f"migration failed: {exc}")
    if args.otel_endpoint:
        tracing.start(tracing.COORDINATOR_SERVICE, args.otel_endpoint)
    try:
        return event_loop.run(_serve_until_signalled(config, args.shutdown_grace))
    except TokensFileError as exc:
        return _fail(EXIT_USAGE, str(exc))
    except (JournalError, AddressInUseError, MissingPackageData) as exc:
        return _fail(EXIT_FAILED, str(exc))
    except ValueError as exc:  # TURNWIRE_EVENT_LOOP names no loop we have
        return _fail(EXIT_USAGE, str(exc))
    finally:
        tracing.shutdown()  # the last spans go out before the process ends


def _health(args: argparse.Namespace) -> int:
    from turnwire.health_probe import coordinator_health

    try:
        tls, _ = security_from_args(args, has_runners=False)
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    return coordinator_health(args.listen, args.address_file, tls, timeout=args.timeout)


def main(argv: Sequence[str] | None = None) -> int:
    exit_unless_server_installed(PROG, EXIT_USAGE)
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "migrate":
        return run_migrate(args, _fail)
    if args.command == "health":
        return _health(args)
    if args.command == "prune":
        return run_prune(args, _fail)
    return run_tokens_add(args, _fail)


if __name__ == "__main__":
    sys.exit(main())
