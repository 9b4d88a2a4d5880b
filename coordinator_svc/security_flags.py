"""``serve``'s security flags (issue 11): TLS or plaintext on loopback, and call limits.

Two ways to run, one of them chosen explicitly:

- ``--tls-cert/--tls-key/--tls-ca``: the public API is served over TLS with
  that certificate, and runners are reached over mutual TLS, presenting the
  same certificate (its CN is the identity runners check) and trusting
  runners whose certificates chain to ``--tls-ca``;
- ``--plaintext``: no TLS, on a loopback ``--listen`` only; runners are then
  reached in plaintext too, each call carrying the secret from
  ``--runner-secret-file`` (the runners are started with the same file).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from coordinator_svc.config import CallLimitSettings
from turnwire.transport_security import (
    RunnerCredentials,
    SecurityConfigError,
    TlsMaterial,
    read_secret_file,
    tls_from_flags,
)


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def add_security_flags(serve: argparse.ArgumentParser) -> None:
    group = serve.add_argument_group(
        "transport security (TLS, or --plaintext on loopback: one is required)",
        "With --tls-*: TLS for the public API, mutual TLS to runners (this certificate's "
        "CN is the identity they check). With --plaintext: loopback --listen only, and "
        "runners are reached with --runner-secret-file's secret on every call.",
    )
    group.add_argument(
        "--tls-cert",
        default=_env("TURNWIRE_COORDINATOR_TLS_CERT"),
        help="certificate chain, PEM (env TURNWIRE_COORDINATOR_TLS_CERT)",
    )
    group.add_argument(
        "--tls-key",
        default=_env("TURNWIRE_COORDINATOR_TLS_KEY"),
        help="its private key, PEM, mode 600 (env TURNWIRE_COORDINATOR_TLS_KEY)",
    )
    group.add_argument(
        "--tls-ca",
        default=_env("TURNWIRE_COORDINATOR_TLS_CA"),
        help="the CA runners' certificates chain to (env TURNWIRE_COORDINATOR_TLS_CA)",
    )
    group.add_argument(
        "--plaintext",
        action="store_true",
        default=_env("TURNWIRE_COORDINATOR_PLAINTEXT") in ("1", "true"),
        help="no TLS, loopback --listen only (env TURNWIRE_COORDINATOR_PLAINTEXT=1)",
    )
    group.add_argument("--runner-secret-file", default=_env("TURNWIRE_RUNNER_SECRET_FILE"),
                       help="with --plaintext: the file (mode 600) whose secret runners were "
                       "started with (env TURNWIRE_RUNNER_SECRET_FILE)")  # fmt: skip


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def add_limit_flags(serve: argparse.ArgumentParser) -> None:
    defaults = CallLimitSettings()
    group = serve.add_argument_group(
        "calls open at once (over a limit: RESOURCE_EXHAUSTED / CONCURRENCY_LIMIT, RetryInfo)"
    )
    for flag, env, field, what in (
        ("--max-calls-per-principal", "TURNWIRE_MAX_CALLS_PER_PRINCIPAL",
         "calls_per_principal", "unary calls one principal has open"),
        ("--max-streams-per-principal", "TURNWIRE_MAX_STREAMS_PER_PRINCIPAL",
         "streams_per_principal", "Watch and SubmitAndWatch streams one principal has open"),
        ("--max-streams", "TURNWIRE_MAX_STREAMS",
         "streams_total", "streams open on this coordinator, whoever opened them"),
    ):  # fmt: skip
        default = getattr(defaults, field)
        group.add_argument(
            flag,
            dest=field,
            type=_at_least_one,
            default=_env(env) or default,
            help=f"{what} (env {env}; default {default})",
        )


def limits_from_args(args: argparse.Namespace) -> CallLimitSettings:
    return CallLimitSettings(
        calls_per_principal=int(args.calls_per_principal),
        streams_per_principal=int(args.streams_per_principal),
        streams_total=int(args.streams_total),
    )


def security_from_args(
    args: argparse.Namespace, *, has_runners: bool
) -> tuple[TlsMaterial | None, RunnerCredentials | None]:
    """(TLS material, runner credentials) from the flags; SecurityConfigError when they
    do not hold together (the message names the flags to give)."""
    tls = tls_from_flags(args.tls_cert, args.tls_key, args.tls_ca)
    if tls is not None:
        if args.plaintext or args.runner_secret_file:
            raise SecurityConfigError(
                "--tls-* and --plaintext/--runner-secret-file exclude each other"
            )
        # With TLS the coordinator can always call runners (its certificate is its
        # client identity), also ones added at run time (§11 M2).
        return tls, RunnerCredentials(tls=tls)
    if not args.plaintext:
        raise SecurityConfigError(
            "choose transport security: --tls-cert, --tls-key and --tls-ca (`turnwire certs` "
            "makes them), or --plaintext on a loopback --listen"
        )
    if args.runner_secret_file:
        return None, RunnerCredentials(secret=read_secret_file(Path(args.runner_secret_file)))
    if has_runners:
        raise SecurityConfigError(
            "--plaintext with runners needs --runner-secret-file: runners serve only a "
            "coordinator that presents their secret"
        )
    return None, None
