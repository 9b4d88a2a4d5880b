"""Options every coordinator-facing subcommand shares, and the client they make.

Extension subcommands (``turnwire demo``, ``turnwire chaos``) reuse these:
``add_connection_options(parser)`` then ``open_client(args)``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from turnwire.client import ConnectionSettings, RetryPolicy, TurnwireClient
from turnwire.client.settings import (
    ADDRESS_ENV,
    CA_FILE_ENV,
    DEFAULT_ADDRESS,
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    tls_trusting,
)

__all__ = [
    "ADDRESS_ENV",
    "CA_FILE_ENV",
    "DEFAULT_ADDRESS",
    "TOKEN_ENV",
    "TOKEN_FILE_ENV",
    "UsageError",
    "add_connection_options",
    "add_json_option",
    "fold_choices",
    "non_negative_int",
    "open_client",
    "parse_pairs",
    "positive_float",
    "resolve_address",
    "resolve_credentials",
    "resolve_token",
]


class UsageError(Exception):
    """A command line that cannot be run as given (exit status 2)."""


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--address",
        metavar="HOST:PORT",
        help=f"coordinator address (default: ${ADDRESS_ENV} or {DEFAULT_ADDRESS})",
    )
    group.add_argument(
        "--token",
        help=f"bearer token (default: ${TOKEN_ENV}); prefer the variable or --token-file, "
        "a flag is visible to other users in `ps`",
    )
    group.add_argument(
        "--token-file",
        type=Path,
        metavar="PATH",
        help=f"read the token from PATH (default: ${TOKEN_FILE_ENV}, used when ${TOKEN_ENV} "
        "is not set)",
    )
    group.add_argument(
        "--ca-file",
        type=Path,
        metavar="PATH",
        help=f"TLS: trust the coordinator's certificate if it chains to this CA (PEM), e.g. "
        f"the ca.pem of `turnwire certs` or `turnwire up` (default: ${CA_FILE_ENV}; "
        "without one the connection is plaintext)",
    )
    group.add_argument(
        "--rpc-timeout",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="deadline of each call (default: 10)",
    )
    group.add_argument(
        "--retries",
        type=non_negative_int,
        default=4,
        metavar="N",
        help="retries after a transient failure, with backoff (default: 4)",
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="machine-readable output: one JSON object per line"
    )


def _settings(args: argparse.Namespace, environ: Mapping[str, str]) -> ConnectionSettings:
    """The connection the flags describe, each missing one from its variable
    (the SDK's own rules: turnwire.client.settings)."""
    return ConnectionSettings.resolve(
        address=args.address,
        token=args.token,
        token_file=args.token_file,
        ca_file=args.ca_file,
        environ=environ,
    )


def resolve_address(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    return _settings(args, environ).address


def resolve_token(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    """The token; CheckConnectionSettings if a token file cannot be read."""
    return _settings(args, environ).token


def resolve_credentials(args: argparse.Namespace, environ: Mapping[str, str]) -> Any:
    """TLS channel credentials trusting --ca-file (or $TURNWIRE_CA_FILE), or None;
    CheckConnectionSettings if that file cannot be read or is not PEM."""
    path = _settings(args, environ).ca_file
    return None if path is None else tls_trusting(path)


def open_client(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> TurnwireClient:
    """The client the connection options describe, built as the SDK's from_env builds it."""
    return TurnwireClient.from_env(
        address=args.address,
        token=args.token,
        token_file=args.token_file,
        ca_file=args.ca_file,
        environ=os.environ if environ is None else environ,
        timeout=args.rpc_timeout,
        retries=RetryPolicy(attempts=1 + args.retries),
    )


def parse_pairs(pairs: Sequence[str] | None, flag: str) -> dict[str, str]:
    """``["k=v", ...]`` -> dict; a pair without ``=`` or with an empty key is a UsageError."""
    parsed: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} takes KEY=VALUE, got {pair!r}")
        parsed[key.strip()] = value
    return parsed


def fold_choices(parser: argparse.ArgumentParser) -> None:
    """Let every option of ``parser`` (and of its subcommands) whose values are a
    list of words take them in any case, with ``_`` or ``-``: ``--state RUNNING``,
    ``--kind READ_ONLY`` and ``--state running`` all work, and the command sees
    the spelling of its choices. An unknown word is left as typed, so argparse
    still refuses it naming every choice. Options with a ``type`` of their own
    are left alone."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                fold_choices(subparser)
        elif action.type is None and action.choices is not None:
            words = [choice for choice in action.choices if isinstance(choice, str)]
            if words:
                action.type = _canonical_word(words)


def _fold(word: str) -> str:
    return word.strip().casefold().replace("_", "-")


def _canonical_word(choices: Sequence[str]) -> Callable[[str], str]:
    canonical = {_fold(choice): choice for choice in choices}

    def canonical_word(text: str) -> str:
        return canonical.get(_fold(text), text)

    return canonical_word


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value
