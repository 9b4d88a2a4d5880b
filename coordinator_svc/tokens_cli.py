"""``python -m coordinator_svc tokens add``: make a token, print it once, store its digest.

    tokens add --file F --principal P [--scope submit|read|cancel|admin]...
               [--expires-in 30d | --expires-at 2027-01-31T00:00:00Z]

A running coordinator picks the new line up by itself (it re-reads the file
when it changes, or on SIGHUP): no restart.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

_DURATION = re.compile(r"\A(\d+)([smhd])\Z")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
SCOPE_NAMES = ("submit", "read", "cancel", "admin")


def duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``12h``, ``30d`` -> timedelta (argparse type)."""
    found = _DURATION.match(text.strip())
    if found is None or int(found.group(1)) == 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive duration such as 3600s, 15m, 12h or 30d, got {text!r}"
        )
    return timedelta(seconds=int(found.group(1)) * _UNIT_SECONDS[found.group(2)])


def moment(text: str) -> datetime:
    """An ISO 8601 time with its offset (argparse type)."""
    from coordinator_svc.api.tokens_file import parse_expiry

    try:
        return parse_expiry(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_tokens_parser(commands: argparse._SubParsersAction[Any]) -> None:
    tokens = commands.add_parser("tokens", help="manage API tokens")
    tokens_commands = tokens.add_subparsers(dest="tokens_command", required=True)
    add = tokens_commands.add_parser(
        "add",
        help="make a token for a principal; print it once, store only its digest",
        description="Make a fresh random token for PRINCIPAL, print it once on stdout and "
        "append its digest (with its scopes and expiry) to the tokens file, which is "
        "rewritten owner-only (mode 600). A running coordinator reloads the file by itself.",
    )
    add.add_argument("--file", required=True, help="the tokens file (created if missing)")
    add.add_argument("--principal", required=True, help="1..128 of A-Z a-z 0-9 . _ - @ :")
    add.add_argument(
        "--scope",
        action="append",
        choices=SCOPE_NAMES,
        help="what the token may do (repeatable): submit (SubmitTurn, SubmitAndWatch), read "
        "(Get/List/WatchOperation; SubmitAndWatch too), cancel, admin (all, and AdminService). "
        "Default: submit, read and cancel",
    )
    expiry = add.add_mutually_exclusive_group()
    expiry.add_argument(
        "--expires-in",
        type=duration,
        help="the token stops working this long from now, e.g. 30d, 12h, 15m, 3600s "
        "(default: never)",
    )
    expiry.add_argument(
        "--expires-at",
        type=moment,
        help="the token stops working at this ISO 8601 time with offset, e.g. "
        "2027-01-31T00:00Z (default: never)",
    )


def run_tokens_add(args: argparse.Namespace, fail: Callable[[int, str], int]) -> int:
    """``fail(code, message) -> int`` prints the one-line error (coordinator_svc.__main__)."""
    from coordinator_svc.api.tokens_file import DEFAULT_SCOPES, Scope, TokensFileError, add_token

    scopes = frozenset(Scope(name) for name in args.scope) if args.scope else DEFAULT_SCOPES
    expires_at: datetime | None = args.expires_at
    if args.expires_in is not None:
        expires_at = datetime.now(UTC).replace(microsecond=0) + args.expires_in
    try:
        token = add_token(args.file, args.principal, scopes=scopes, expires_at=expires_at)
    except TokensFileError as exc:
        return fail(2, str(exc))
    except OSError as exc:
        return fail(1, f"cannot write {args.file}: {exc.strerror}")
    print(token, flush=True)
    until = f", expires {expires_at.isoformat()}" if expires_at else ", never expires"
    print(
        f"stored the digest for principal {args.principal!r} in {Path(args.file)} "
        f"(scopes {','.join(sorted(scopes))}{until}); the token above is shown only this once",
        file=sys.stderr,
    )
    return 0
