"""The runner store's errors, in a module of their own so that the store and
the stores beside it (``executor_records``) import them without importing
each other (no import circle). Callers fail closed on any of them."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The runner store failed; callers fail closed."""


class StoreLockedError(StoreError):
    """Another live process holds this store's lock (one live process per store, §6)."""


class StoreReadError(StoreError):
    """A read failed; nothing was decided from it."""


class StoreWriteError(StoreError):
    """A write failed and was rolled back; nothing changed."""


class StoreFencedError(StoreWriteError):
    """A newer incarnation opened the store; this one may write nothing (§6)."""
