"""``turnwire-coordinator serve --check-config``: every check start-up makes, all at once.

Each check is the function ``serve`` itself calls before it opens anything
(``config_from_args``' parts, ``app.transport_security_rules``,
``app.check_replica_config``, the tokens file's loader, the journal's schema
rule), plus a look at the certificates, the journal's reachability and the
environment that start-up would only find out about half-way through. It
prints one line per check and exits 0 (all good) or 2 (problems), without
serving, migrating or locking anything (turnwire/config_check.py).
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from coordinator_svc.api.tokens_file import Scope, load_tokens
from coordinator_svc.app import check_replica_config, transport_security_rules
from coordinator_svc.config import CoordinatorConfig, RunnerEndpoint
from coordinator_svc.core.quotas import PrincipalLimits
from coordinator_svc.security_flags import security_from_args
from coordinator_svc.storage.journal_check import check_journal
from turnwire import event_loop
from turnwire.cert_check import check_tls_files, describe
from turnwire.config_check import (
    ConfigReport,
    Warned,
    check_environment,
    environment_names,
    writable_directory_for,
)
from turnwire.transport_security import (
    DEFAULT_COORDINATOR_IDENTITIES,
    RunnerCredentials,
    TlsMaterial,
)

# Stands for TLS material that was asked for but could not be read (that is its own
# problem, reported once): the rules that only ask "TLS or plaintext?" still run.
_UNREADABLE_TLS = TlsMaterial(b"", b"", b"")


def _client_names() -> set[str]:
    from turnwire.cli import build_parser as cli_parser

    return environment_names(cli_parser())


def _coordinators(name: str) -> bool:
    """The coordinator's namespace: every TURNWIRE_* but the runner's TURNWIRE_RUNNER_*."""
    return not name.startswith("TURNWIRE_RUNNER_")


QuotaSpecs = list[tuple[str, PrincipalLimits]]


@dataclass(frozen=True)
class ArgsReaders:
    """How ``serve`` reads its arguments (``coordinator_svc.__main__``), handed in
    so this module does not import the CLI that imports it (no import circle)."""

    runners: Callable[[argparse.Namespace], list[RunnerEndpoint]]
    quotas: Callable[[argparse.Namespace], QuotaSpecs]
    config: Callable[
        [
            argparse.Namespace,
            Sequence[RunnerEndpoint],
            Sequence[tuple[str, PrincipalLimits]],
            TlsMaterial | None,
            RunnerCredentials | None,
        ],
        CoordinatorConfig,
    ]


def run_check_config(
    args: argparse.Namespace, parser: argparse.ArgumentParser, prog: str, cli: ArgsReaders
) -> int:
    """Check ``serve``'s configuration as parsed into ``args``; print; 0 or 2."""
    report = ConfigReport(prog)
    own = environment_names(parser) | {event_loop.ENV}
    report.check(
        "environment",
        lambda: check_environment(os.environ, own, _client_names(), _coordinators),
    )
    report.check("event loop", lambda: f"{event_loop.chosen()} ({event_loop.ENV})")
    runners = report.check("runners", lambda: cli.runners(args), show=_runners)
    quotas = report.check(
        "principal quotas",
        lambda: cli.quotas(args),
        show=lambda q: f"{len(q)} principal(s) with quotas of their own",
    )
    security = report.check(
        "transport security",
        lambda: security_from_args(args, has_runners=bool(runners)),
        show=lambda s: "TLS (mutual TLS to runners)" if s[0] is not None else "plaintext",
    )
    tls_wanted = bool(args.tls_cert or args.tls_key or args.tls_ca)
    if security is not None and security[0] is not None:
        report.check("TLS certificate", lambda: _certificate(args, bool(runners)))
    elif tls_wanted:
        report.skipped("TLS certificate", "fix the transport security problem first")
    if runners is not None and quotas is not None:
        tls = security[0] if security is not None else (_UNREADABLE_TLS if tls_wanted else None)
        credentials = security[1] if security is not None else None
        config = cli.config(args, runners, quotas, tls, credentials)
        chosen = security is not None or tls_wanted or args.plaintext
        _check_config_rules(report, config, wanted_runners=bool(runners), chosen=chosen)
    report.check(
        "tokens file",
        lambda: _tokens(args.tokens_file),
        fix="write it with `turnwire-coordinator tokens add --file FILE --principal NAME` "
        "(mode 600: lines '<principal> <sha256 hex of the token> [scopes=...] [expires=...]')",
    )
    report.check("journal", lambda: check_journal(args.journal_url, will_migrate=args.migrate))
    for flag, value in (
        ("--address-file", args.address_file),
        ("--metrics-address-file", args.metrics_address_file),
    ):
        if value:
            report.check(flag, functools.partial(writable_directory_for, Path(value), flag))
    return report.print()


def _check_config_rules(
    report: ConfigReport, config: CoordinatorConfig, *, wanted_runners: bool, chosen: bool
) -> None:
    """The start-up rules on ``config``; those about TLS or plaintext only once one was
    chosen (else the transport security problem above says so, once)."""
    for subject, rule in transport_security_rules(config):
        if subject == "runner credentials" and wanted_runners and config.runner_credentials is None:
            continue  # the transport security check above already said what is missing
        if not chosen:
            report.skipped(subject, "TLS or plaintext? fix transport security first")
            continue
        report.check(subject, rule)
    report.check("replicas", lambda: _replica(config))


def _runners(runners: list[RunnerEndpoint]) -> str | Warned:
    if not runners:
        return Warned("no --runner (TURNWIRE_RUNNERS): accepted turns wait, nothing runs them")
    return ", ".join(f"{r.name}={r.address}" for r in runners)


def _certificate(args: argparse.Namespace, has_runners: bool) -> str | Warned:
    cert, key, ca = Path(args.tls_cert), Path(args.tls_key), Path(args.tls_ca)
    summary = check_tls_files(cert, key, ca, role="coordinator")
    note = ""
    if has_runners and summary.common_name not in DEFAULT_COORDINATOR_IDENTITIES:
        note = (
            f"; runners accept CN {summary.common_name!r} only when started with "
            f"--coordinator-identity {summary.common_name}"
        )
    return describe(summary, ca, note)


def _replica(config: CoordinatorConfig) -> str:
    check_replica_config(config)
    if config.replica_id is not None:
        return f"replica id {config.replica_id}, lease TTL {config.lease_ttl:g} s"
    return "no --replica-id (on PostgreSQL: this host's name)"


def _tokens(path: str | None) -> str | Warned:
    if not path:
        return Warned("no --tokens-file: every TurnService and AdminService call is refused")
    entries = load_tokens(path)  # what Authenticator.from_file reads, mode check included
    admins = sum(1 for entry in entries if Scope.ADMIN in entry.scopes)
    if not entries:
        return Warned(f"{path} holds no token: every call is refused")
    principals = len({entry.principal for entry in entries})
    return f"{path}: {principals} principal(s), {admins} admin token(s)"
