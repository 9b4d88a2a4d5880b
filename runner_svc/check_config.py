"""``turnwire-runner serve --check-config``: every check start-up makes, all at once.

The checks are the runner's own: ``access_from_args`` (who may call it, with
the key and secret files' mode rules), ``check_executor_flags`` and
``load_executors`` (the executors it would run), ``app.config_rules`` (what
``start_runner`` refuses before it opens anything), the store's schema rule;
plus the certificates and the environment. One line per check; exit 0 (all
good) or 2 (problems), without serving, creating or locking anything
(turnwire/config_check.py).
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runner_svc.app import RunnerConfig, config_rules
from runner_svc.executors.registry import load_executors
from runner_svc.retention_flags import retention_from_args
from runner_svc.storage.store_check import check_store
from turnwire import event_loop
from turnwire.cert_check import check_tls_files, describe
from turnwire.config_check import (
    ConfigReport,
    Warned,
    check_environment,
    environment_names,
    writable_directory_for,
)
from turnwire.transport_security import RunnerAccess, TlsMaterial


def _client_names() -> set[str]:
    from turnwire.cli import build_parser as cli_parser

    return environment_names(cli_parser())


def _runners(name: str) -> bool:
    """The runner's namespace: TURNWIRE_RUNNER_* (the coordinator's are the others)."""
    return name.startswith("TURNWIRE_RUNNER_")


@dataclass(frozen=True)
class ArgsReaders:
    """How ``serve`` reads its arguments (``runner_svc.__main__``), handed in so
    this module does not import the CLI that imports it (no import circle)."""

    access: Callable[[argparse.Namespace], RunnerAccess]
    check_executor_flags: Callable[[argparse.Namespace], None]
    executor_flags: Callable[[argparse.Namespace], list[str]]


def run_check_config(
    args: argparse.Namespace, parser: argparse.ArgumentParser, prog: str, cli: ArgsReaders
) -> int:
    """Check ``serve``'s configuration as parsed into ``args``; print; 0 or 2."""
    report = ConfigReport(prog)
    own = environment_names(parser) | {event_loop.ENV}
    report.check(
        "environment", lambda: check_environment(os.environ, own, _client_names(), _runners)
    )
    report.check("event loop", lambda: f"{event_loop.chosen()} ({event_loop.ENV})")
    access = report.check(
        "who may call",
        lambda: cli.access(args),
        show=_who,
    )
    if access is not None and access.tls is not None:
        report.check("TLS certificate", lambda: _certificate(args, access))
    elif args.tls_cert or args.tls_key or args.tls_ca:
        report.skipped("TLS certificate", "fix the problem of who may call first")
    report.check("executor", lambda: _executor(args, cli))
    retention = report.check("retention", lambda: retention_from_args(args), show=lambda r: "ok")
    tls_wanted = bool(args.tls_cert or args.tls_key or args.tls_ca)
    if retention is not None:
        stand_in = RunnerAccess(tls=_UNREADABLE_TLS) if tls_wanted else None
        config = RunnerConfig(
            store_path=Path(args.store),
            access=access or stand_in,
            listen=args.listen,
            writable_slots=args.writable_slots,
            read_only_slots=args.read_only_slots,
            max_receive_bytes=args.max_receive_bytes,
            retention=retention,
            metrics_listen=args.metrics_listen,
        )
        for subject, rule in config_rules(config):
            if subject == "who may call":
                continue  # checked above, with its reason
            if config.access is None and subject in ("listen address", "metrics address"):
                report.skipped(subject, "TLS or plaintext? fix the problem of who may call first")
                continue
            report.check(subject, rule)
    report.check(
        "store",
        lambda: check_store(Path(args.store)),
        fix="run the runner version that wrote it, or give this runner a store of its own",
    )
    for flag, value in (
        ("--address-file", args.address_file),
        ("--metrics-address-file", args.metrics_address_file),
        ("--ledger", args.ledger),
    ):
        if value:
            report.check(flag, functools.partial(writable_directory_for, Path(value), flag))
    return report.print()


# Stands for TLS material that was asked for but could not be read (its own problem,
# reported once): the rules that only ask "TLS or plaintext?" still run.
_UNREADABLE_TLS = TlsMaterial(b"", b"", b"")


def _who(access: RunnerAccess) -> str:
    if access.tls is None:
        return "plaintext, callers must present the secret of --coordinator-secret-file"
    names = ", ".join(sorted(access.coordinator_identities))
    return f"mutual TLS, callers whose certificate CN is one of: {names}"


def _certificate(args: argparse.Namespace, access: RunnerAccess) -> str | Warned:
    cert, key, ca = Path(args.tls_cert), Path(args.tls_key), Path(args.tls_ca)
    summary = check_tls_files(cert, key, ca, role="runner")
    note = "; coordinators must dial it by one of those names"
    if summary.common_name not in access.coordinator_identities:
        note += (
            f"; `turnwire-runner health` presents it, so it needs --coordinator-identity "
            f"{summary.common_name} too"
        )
    return describe(summary, ca, note)


def _executor(args: argparse.Namespace, cli: ArgsReaders) -> str:
    cli.check_executor_flags(args)
    flags = cli.executor_flags(args)
    executors = load_executors(flags, ledger_path=Path(args.ledger) if args.ledger else None)
    return executors.describe()
