"""``python -m runner_svc serve|migrate``: the runner process.

Flags fall back to environment variables (TURNWIRE_RUNNER_*), then defaults.
SIGTERM or SIGINT drains (R8) and exits 0.

A runner serves only its coordinator (issue 11): start it with mutual TLS
(``--tls-cert/--tls-key/--tls-ca``, certificates from ``turnwire certs``) or,
on a loopback address, ``--plaintext --coordinator-secret-file F``.
"""

from __future__ import annotations

# First, before anything loads grpc: it reads this switch as it loads.
from runner_svc import fork_safety

fork_safety.turn_off_grpc_fork_handlers()

from turnwire.distribution import (
    MissingPackageData,
    add_version_flag,
    exit_unless_server_installed,
    invoked_as,
)

SCRIPT = "turnwire-runner"
PROG = invoked_as(SCRIPT, "runner_svc")
# A client-only install (no `server` extra) fails here in one line naming the
# fix, not with a traceback from the imports below that need SQLAlchemy.
exit_unless_server_installed(PROG, 2)

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from runner_svc.app import RunnerConfig, start_runner
from runner_svc.executor_sweep import ExecutorSweepError
from runner_svc.executors.registry import split_named
from runner_svc.retention_flags import add_retention_arguments, retention_from_args
from runner_svc.storage.sqlite_store import StoreError
from turnwire import event_loop
from turnwire.limits import DEFAULT_RUNNER_MAX_RECEIVE_BYTES, parse_byte_count
from turnwire.observability import tracing
from turnwire.observability.logs import LOG_LEVELS, add_log_format_flag, configure_logging
from turnwire.observability.metrics_http import add_metrics_arguments
from turnwire.output_stream import StreamLimits
from turnwire.seconds import positive_seconds
from turnwire.serving import AddressInUseError, announce
from turnwire.transport_security import (
    DEFAULT_COORDINATOR_IDENTITIES,
    RunnerAccess,
    SecurityConfigError,
    read_secret_file,
    tls_from_flags,
)

log = logging.getLogger("runner_svc")
_ENV = "TURNWIRE_RUNNER_"


def _env(name: str, default: str | None) -> str | None:
    return os.environ.get(_ENV + name, default)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Turnwire runner: executes dispatched turns."
    )
    add_version_flag(parser, SCRIPT)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve until SIGTERM/SIGINT",
        description="Serve until SIGTERM or SIGINT, then drain (R8) and exit 0. Each flag "
        "falls back to its environment variable, then to its default (shown as it applies "
        "now, the variable's value included).",
    )
    _add_serve_arguments(serve)
    serve.add_argument(
        "--check-config",
        action="store_true",
        help="check the flags, environment, files, certificates, executor and store (its "
        "directory, its schema), print every problem with its fix, and exit without "
        "serving: 0 all good, 2 problems (docs/DEPLOYMENT.md)",
    )
    health = commands.add_parser(
        "health",
        help="ask a running runner's gRPC health; exit 0 SERVING, 1 otherwise",
        description="Ask the runner that `serve` with these same flags runs (at --listen, "
        "or the address in --address-file; 0.0.0.0 and :: mean this host's loopback) for "
        "its grpc.health.v1 status, presenting its own certificate (so its CN must be "
        "among its --coordinator-identity values) or, in plaintext, its secret; exit 0 "
        "when SERVING, 1 otherwise. It takes every serve flag, so a container's health "
        "check can be given the service's own command line.",
    )
    _add_serve_arguments(health)
    for action in health._actions:
        if action.dest == "store":
            action.required = False  # the probe never opens the store
    health.add_argument("--timeout", type=float, default=5.0, help="seconds to wait (default 5)")
    migrate = commands.add_parser("migrate", help="create or upgrade a store's schema, then exit")
    _store_flag(migrate)
    migrate.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        help="the least to log (default %(default)s)",
    )
    add_log_format_flag(migrate, _ENV + "LOG_FORMAT")
    return parser


def _store_flag(parser: argparse.ArgumentParser) -> None:
    store = _env("STORE", None)
    parser.add_argument(
        "--store",
        default=store,
        required=store is None,
        help="SQLite file of the dedupe store (env TURNWIRE_RUNNER_STORE; "
        + (f"default {store})" if store is not None else "required)"),
    )


def _add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--listen",
        default=_env("LISTEN", "127.0.0.1:50061"),
        help="HOST:PORT (port 0 picks one and prints it) "
        "(env TURNWIRE_RUNNER_LISTEN; default %(default)s)",
    )
    _store_flag(serve)
    serve.add_argument(
        "--writable-slots",
        type=int,
        default=int(_env("WRITABLE_SLOTS", "4") or 4),
        help="slots for WRITABLE turns (env TURNWIRE_RUNNER_WRITABLE_SLOTS; default %(default)s)",
    )
    serve.add_argument(
        "--read-only-slots",
        type=int,
        default=int(_env("READ_ONLY_SLOTS", "4") or 4),
        help="slots for READ_ONLY turns (env TURNWIRE_RUNNER_READ_ONLY_SLOTS; default %(default)s)",
    )
    serve.add_argument(
        "--executor",
        action="append",
        default=None,
        metavar="[NAME=]SPEC",
        help="an executor this runner serves, repeatable: NAME=SPEC serves SPEC to turns "
        "naming NAME, a bare SPEC is the default executor (turns naming none). SPEC: echo | "
        "sleep | fail | metered | python:<module>:<name> | subprocess+framed:<cmd> | "
        "subprocess:<cmd> | callable:<module>:<function> (deprecated); metered needs "
        "--ledger; docs/EXECUTORS.md (env TURNWIRE_RUNNER_EXECUTOR: one bare SPEC; "
        f"default {_env('EXECUTOR', 'echo')})",
    )
    serve.add_argument(
        "--ledger",
        default=_env("LEDGER", None),
        help="the file where the metered executor records every start (turnwire.ledger); "
        "required with --executor metered (env TURNWIRE_RUNNER_LEDGER)",
    )
    serve.add_argument(
        "--drain-seconds",
        type=float,
        default=float(_env("DRAIN_SECONDS", "10") or 10),
        help="how long shutdown waits for jobs before cancelling them "
        "(env TURNWIRE_RUNNER_DRAIN_SECONDS; default %(default)s)",
    )
    serve.add_argument(
        "--max-receive-bytes",
        type=parse_byte_count,
        default=_env("MAX_RECEIVE_BYTES", str(DEFAULT_RUNNER_MAX_RECEIVE_BYTES)),
        help="the largest Dispatch this runner receives (e.g. 4194304, 4M); the coordinator "
        "must be given the same value (README, message limits) "
        "(env TURNWIRE_RUNNER_MAX_RECEIVE_BYTES; default %(default)s)",
    )
    serve.add_argument(
        "--admission-window",
        type=positive_seconds,
        default=_env("ADMISSION_WINDOW", "7"),
        help="seconds: a Dispatch stamped longer ago than this (coordinator clock) is refused "
        "DISPATCH_STALE and the coordinator sends it again with a fresh stamp (a cost in "
        "re-sends, never in safety); keep it above the usual time from a coordinator's "
        "write-ahead to its Dispatch's arrival plus the clock skew. After a SIGKILL, turns "
        "sent within this window (plus --floor-interval) of the crash end UNKNOWN rather "
        "than being proven absent (PROTOCOL.md §6.1 W2a) "
        "(env TURNWIRE_RUNNER_ADMISSION_WINDOW; default %(default)s)",
    )
    serve.add_argument(
        "--floor-interval",
        type=positive_seconds,
        default=_env("FLOOR_INTERVAL", "0.25"),
        help="seconds between two raises (each a store write) of the admission floor: the "
        "floor trails the clock by at most --admission-window plus this "
        "(env TURNWIRE_RUNNER_FLOOR_INTERVAL; default %(default)s)",
    )
    _add_stream_arguments(serve)
    _add_access_arguments(serve)
    add_retention_arguments(serve)
    tracing.add_endpoint_flag(serve, _ENV + "OTEL_ENDPOINT")
    serve.add_argument(
        "--address-file", default=None, help="write the bound HOST:PORT to this file once listening"
    )
    _add_metrics_arguments(serve)
    serve.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        help="the least to log (default %(default)s)",
    )
    add_log_format_flag(serve, _ENV + "LOG_FORMAT")
    serve.add_argument(
        "--name",
        default=_env("NAME", None),
        help="this runner's name as its coordinator's --runner NAME=... calls it; every log "
        "line carries it as runner (env TURNWIRE_RUNNER_NAME)",
    )


def _add_stream_arguments(serve: argparse.ArgumentParser) -> None:
    """Streamed output (PROTOCOL.md R13, docs/EXECUTORS.md)."""
    limits = StreamLimits()
    stream = serve.add_argument_group(
        "streamed output (emit() and chunk frames; kept in memory only, never stored)"
    )
    for flag, env, default, what in (
        ("--stream-chunk-bytes", "STREAM_CHUNK_BYTES", limits.max_chunk_bytes,
         "the largest chunk an executor may emit; a bigger one is refused to it"),
        ("--stream-turn-budget", "STREAM_TURN_BUDGET", limits.turn_budget_bytes,
         "the most one execution may emit in all; past it chunks are refused to it"),
        ("--stream-buffer-bytes", "STREAM_BUFFER_BYTES", limits.stream_buffer_bytes,
         "the most one operation's stream holds; its oldest chunks are dropped past it"),
        ("--stream-runner-bytes", "STREAM_RUNNER_BYTES", limits.total_buffer_bytes,
         "the most all streams hold together; settled turns' chunks are dropped first"),
    ):  # fmt: skip
        stream.add_argument(
            flag,
            type=parse_byte_count,
            default=_env(env, str(default)),
            help=f"{what} (e.g. 65536, 64K) (env TURNWIRE_RUNNER_{env}; default %(default)s)",
        )
    stream.add_argument(
        "--stream-keep-seconds",
        type=float,
        default=float(_env("STREAM_KEEP_SECONDS", "60") or 60),
        help="how long a settled turn's chunks stay readable by StreamOutput "
        "(env TURNWIRE_RUNNER_STREAM_KEEP_SECONDS; default %(default)s)",
    )


def stream_limits_from_args(args: argparse.Namespace) -> StreamLimits:
    """The stream flags as StreamLimits; ValueError when they do not fit together."""
    return StreamLimits(
        max_chunk_bytes=args.stream_chunk_bytes,
        turn_budget_bytes=args.stream_turn_budget,
        stream_buffer_bytes=args.stream_buffer_bytes,
        total_buffer_bytes=args.stream_runner_bytes,
    )


def executor_flags(args: argparse.Namespace) -> list[str]:
    """Every --executor value; with none, the environment's (or echo) as the default."""
    return list(args.executor) if args.executor else [_env("EXECUTOR", "echo") or "echo"]


def _add_metrics_arguments(serve: argparse.ArgumentParser) -> None:
    """Issue 13: Prometheus metrics (docs/METRICS.md)."""
    add_metrics_arguments(
        serve,
        env_prefix=_ENV,
        listen_default=_env("METRICS_LISTEN", None),
        address_file_default=_env("METRICS_ADDRESS_FILE", None),
    )


def _add_access_arguments(serve: argparse.ArgumentParser) -> None:
    access = serve.add_argument_group(
        "who may call this runner (one of the two is required)",
        "mutual TLS: the caller's certificate must chain to --tls-ca and name a "
        "--coordinator-identity as its CN; or, on a loopback --listen only, --plaintext "
        "with --coordinator-secret-file (every call must carry that secret)",
    )
    access.add_argument(
        "--tls-cert",
        default=_env("TLS_CERT", None),
        help="this runner's certificate chain, PEM (env TURNWIRE_RUNNER_TLS_CERT)",
    )
    access.add_argument(
        "--tls-key",
        default=_env("TLS_KEY", None),
        help="its private key, PEM, mode 600 (env TURNWIRE_RUNNER_TLS_KEY)",
    )
    access.add_argument(
        "--tls-ca",
        default=_env("TLS_CA", None),
        help="the CA coordinators' certificates chain to (env TURNWIRE_RUNNER_TLS_CA)",
    )
    access.add_argument(
        "--coordinator-identity",
        action="append",
        default=None,
        metavar="CN",
        help="a certificate CN allowed to call this runner (repeatable; default: "
        + ", ".join(sorted(DEFAULT_COORDINATOR_IDENTITIES))
        + ")",
    )
    access.add_argument(
        "--plaintext",
        action="store_true",
        default=_env("PLAINTEXT", "") in ("1", "true"),
        help="no TLS: loopback --listen only, with --coordinator-secret-file "
        "(env TURNWIRE_RUNNER_PLAINTEXT=1)",
    )
    access.add_argument(
        "--coordinator-secret-file", default=_env("COORDINATOR_SECRET_FILE", None),
        help="with --plaintext: a file (mode 600) holding the secret every call must carry; "
        "the coordinator is given the same file (env TURNWIRE_RUNNER_COORDINATOR_SECRET_FILE)",
    )  # fmt: skip


def access_from_args(args: argparse.Namespace) -> RunnerAccess:
    """The runner's RunnerAccess from its flags; SecurityConfigError says what is missing."""
    tls = tls_from_flags(args.tls_cert, args.tls_key, args.tls_ca)
    if tls is not None:
        if args.plaintext or args.coordinator_secret_file:
            raise SecurityConfigError(
                "--tls-* and --plaintext/--coordinator-secret-file exclude each other"
            )
        identities = frozenset(args.coordinator_identity or DEFAULT_COORDINATOR_IDENTITIES)
        return RunnerAccess(tls=tls, coordinator_identities=identities)
    if not args.plaintext:
        raise SecurityConfigError(
            "a runner serves only its coordinator: give --tls-cert, --tls-key and --tls-ca "
            "(mutual TLS; `turnwire certs` makes them), or --plaintext with "
            "--coordinator-secret-file on a loopback --listen"
        )
    if not args.coordinator_secret_file:
        raise SecurityConfigError("--plaintext needs --coordinator-secret-file")
    if args.coordinator_identity:
        raise SecurityConfigError("--coordinator-identity applies to mutual TLS only")
    return RunnerAccess(secret=read_secret_file(Path(args.coordinator_secret_file)))


def check_executor_flags(args: argparse.Namespace) -> None:
    """The executors' own flags, before anything is opened: metered needs --ledger."""
    for flag in executor_flags(args):
        if split_named(flag.strip())[1].strip() == "metered" and not args.ledger:
            raise ValueError(
                "--executor metered needs --ledger FILE (or TURNWIRE_RUNNER_LEDGER): the file "
                "where it records every start, so each one can be counted and billed"
            )


async def _serve(args: argparse.Namespace) -> int:
    config = RunnerConfig(
        store_path=Path(args.store),
        access=access_from_args(args),
        listen=args.listen,
        writable_slots=args.writable_slots,
        read_only_slots=args.read_only_slots,
        executor=None,
        executors=tuple(executor_flags(args)),
        ledger_path=Path(args.ledger) if args.ledger else None,
        drain_seconds=args.drain_seconds,
        address_file=Path(args.address_file) if args.address_file else None,
        max_receive_bytes=args.max_receive_bytes,
        admission_window_seconds=args.admission_window,
        floor_interval_seconds=args.floor_interval,
        retention=retention_from_args(args),
        metrics_listen=args.metrics_listen,
        metrics_address_file=Path(args.metrics_address_file) if args.metrics_address_file else None,
        stream_limits=stream_limits_from_args(args),
        stream_keep_seconds=args.stream_keep_seconds,
    )
    runner = await start_runner(config)
    # The handlers go in before the address is announced: a launcher may send
    # SIGTERM the moment it reads it, and that must drain (R8), not kill.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    announce(runner.address, None)
    if runner.metrics is not None:
        print(f"metrics on {runner.metrics.url}", flush=True)
    await stop.wait()
    log.info("signal received: draining incarnation %s", runner.incarnation_id)
    await runner.stop(drain=True)
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from runner_svc.storage import migrate
    from runner_svc.storage.sqlite_store import lock_store, make_engine

    path = Path(args.store)
    migrate.script_location()  # an incomplete install fails here, before any file is made
    lock = lock_store(path)  # never migrate under a live runner
    engine = make_engine(path)
    try:
        with engine.connect() as connection:
            revision = migrate.current_revision(connection)
            migrate.check_known(revision, str(path))
            migrate.upgrade_to_head(connection)
            connection.commit()
        log.info("store %s migrated from %s to %s", path, revision, migrate.head_revision())
    finally:
        engine.dispose()
        lock.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(
        args.log_level, args.log_format, process_fields={"runner": getattr(args, "name", None)}
    )
    try:
        if args.command == "migrate":
            return _migrate(args)
        if args.command == "health":
            from turnwire.health_probe import runner_health

            return runner_health(
                args.listen, args.address_file, access_from_args(args), timeout=args.timeout
            )
        if args.check_config:
            from runner_svc.check_config import ArgsReaders, run_check_config

            readers = ArgsReaders(access_from_args, check_executor_flags, executor_flags)
            return run_check_config(args, _parser(), PROG, readers)
        check_executor_flags(args)
        if args.otel_endpoint:
            tracing.start(tracing.RUNNER_SERVICE, args.otel_endpoint)
        return event_loop.run(_serve(args))
    except (
        StoreError,
        ExecutorSweepError,
        AddressInUseError,
        MissingPackageData,
        ValueError,
    ) as exc:
        print(f"runner: {exc}", file=sys.stderr, flush=True)
        return 2
    finally:
        tracing.shutdown()  # the last spans go out before the process ends


if __name__ == "__main__":
    sys.exit(main())
