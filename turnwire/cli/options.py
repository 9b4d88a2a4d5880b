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

import grpc

from turnwire.client import RetryPolicy, TurnwireClient

DEFAULT_ADDRESS = "127.0.0.1:50051"
ADDRESS_ENV = "TURNWIRE_ADDRESS"
TOKEN_ENV = "TURNWIRE_TOKEN"
CA_FILE_ENV = "TURNWIRE_CA_FILE"


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
    group.add_argument("--token-file", type=Path, metavar="PATH", help="read the token from PATH")
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


def resolve_address(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    address: str = args.address or environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS
    return address


def resolve_token(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    if args.token:
        return str(args.token)
    if args.token_file is not None:
        try:
            return str(args.token_file.read_text(encoding="utf-8").strip())
        except OSError as error:
            raise UsageError(f"cannot read --token-file: {error.strerror}") from None
    return environ.get(TOKEN_ENV) or None


def resolve_credentials(args: argparse.Namespace, environ: Mapping[str, str]) -> Any:
    """TLS channel credentials trusting --ca-file (or $TURNWIRE_CA_FILE), or None."""
    path = args.ca_file or (Path(environ[CA_FILE_ENV]) if environ.get(CA_FILE_ENV) else None)
    if path is None:
        return None
    try:
        return grpc.ssl_channel_credentials(root_certificates=path.read_bytes())
    except OSError as error:
        raise UsageError(f"cannot read --ca-file {path}: {error.strerror}") from None


def open_client(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> TurnwireClient:
    environ = os.environ if environ is None else environ
    return TurnwireClient(
        resolve_address(args, environ),
        resolve_token(args, environ),
        timeout=args.rpc_timeout,
        retries=RetryPolicy(attempts=1 + args.retries),
        credentials=resolve_credentials(args, environ),
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
