"""Record builders for storage tests: the public ones from ``turnwire.testing.records``."""

from __future__ import annotations

from turnwire.testing.records import (
    T0,
    bookkeeping,
    digest,
    dispatch,
    first_event,
    new_operation,
    submitted,
    transition,
)

__all__ = [
    "T0",
    "bookkeeping",
    "digest",
    "dispatch",
    "first_event",
    "new_operation",
    "submitted",
    "transition",
]
