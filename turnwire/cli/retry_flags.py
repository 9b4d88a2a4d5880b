"""`turnwire submit --max-retries N [--retry-backoff INITIAL[:MAX[:MULT]]]` (PROTOCOL.md R15).

The flags become the turn's retry policy (``TurnRetry``); the coordinator
checks the bounds (``turnwire.retry_policy``) and refuses a policy out of them
naming the field.
"""

from __future__ import annotations

import argparse

from turnwire.cli.options import UsageError, non_negative_int
from turnwire.client import TurnRetry
from turnwire.retry_policy import DEFAULT_INITIAL_BACKOFF, DEFAULT_MAX_BACKOFF, DEFAULT_MULTIPLIER


def add_retry_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-retries",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="run the executor again, up to N times, after a failure it declared had no "
        "effect (RetryableNoEffect, exit 75); never after any other failure "
        "(default: 0, no retry; PROTOCOL.md R15)",
    )
    parser.add_argument(
        "--retry-backoff",
        type=retry_backoff,
        default=None,
        metavar="INITIAL[:MAX[:MULT]]",
        help="seconds to wait before the first retry, the most between two, and the "
        "factor each wait grows by (default: 1:60:2); the executor's retry_after "
        "lengthens a wait",
    )


def retry_from_args(args: argparse.Namespace) -> TurnRetry | None:
    """R15: --max-retries N (and --retry-backoff) as the turn's retry policy."""
    if args.retry_backoff is not None and not args.max_retries:
        raise UsageError("--retry-backoff needs --max-retries N (N at least 1)")
    if not args.max_retries:
        return None
    initial, largest, multiplier = args.retry_backoff or (None, None, None)
    return TurnRetry(
        max_retries=args.max_retries,
        initial_backoff=DEFAULT_INITIAL_BACKOFF if initial is None else initial,
        max_backoff=(max(DEFAULT_MAX_BACKOFF, initial or 0.0) if largest is None else largest),
        multiplier=DEFAULT_MULTIPLIER if multiplier is None else multiplier,
    )


def retry_backoff(text: str) -> tuple[float, float | None, float | None]:
    """``INITIAL[:MAX[:MULT]]`` in seconds (argparse type)."""
    parts = text.split(":")
    try:
        if not 1 <= len(parts) <= 3:
            raise ValueError
        values = [float(part) for part in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected INITIAL[:MAX[:MULT]] in seconds, e.g. 0.5:30:2; got {text!r}"
        ) from None
    if any(value < 0 or value != value for value in values):
        raise argparse.ArgumentTypeError(f"backoffs and factor must not be negative: {text!r}")
    padded = [*values, None, None][:3]
    return values[0], padded[1], padded[2]
