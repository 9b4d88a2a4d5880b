"""Seconds on the command line, as both services' flags take them."""

from __future__ import annotations

import argparse


def positive_seconds(text: str) -> float:
    """argparse type: seconds, more than 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value
