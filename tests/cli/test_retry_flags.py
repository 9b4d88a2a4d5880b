"""`turnwire submit --max-retries N [--retry-backoff INITIAL[:MAX[:MULT]]]` (PROTOCOL.md R15)."""

from __future__ import annotations

import argparse

import pytest

from turnwire.cli.options import UsageError
from turnwire.cli.retry_flags import add_retry_flags, retry_backoff, retry_from_args
from turnwire.client import TurnRetry


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_retry_flags(parser)
    return parser


@pytest.mark.rule("R15")
def test_retry_flags_make_the_turns_retry_policy() -> None:
    """R15: no flag is no policy; --max-retries N alone takes the defaults; the backoff
    spells INITIAL[:MAX[:MULT]] in seconds."""
    parser = _parser()
    assert retry_from_args(parser.parse_args([])) is None
    assert retry_from_args(parser.parse_args(["--max-retries", "2"])) == TurnRetry(2)
    parsed = parser.parse_args(["--max-retries", "1", "--retry-backoff", "0.5:30:3"])
    assert retry_from_args(parsed) == TurnRetry(1, 0.5, 30.0, 3.0)
    assert retry_backoff("2") == (2.0, None, None)


@pytest.mark.rule("R15")
def test_a_backoff_without_retries_or_malformed_is_a_usage_error() -> None:
    """R15: --retry-backoff needs --max-retries; a backoff must be numbers, not negative."""
    with pytest.raises(UsageError):
        retry_from_args(_parser().parse_args(["--retry-backoff", "1"]))
    for bad in ("a:b", "1:2:3:4", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            retry_backoff(bad)
