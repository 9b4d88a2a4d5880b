"""Identifiers shared by both services (PROTOCOL.md §1)."""

from __future__ import annotations

import hashlib
import re
import secrets
import time
import uuid
from datetime import UTC, datetime, timedelta

_INCARNATION_RE = re.compile(r"\A[0-9a-f]{32}\Z")


def new_incarnation_id() -> str:
    """32 lowercase hex chars, random, made at process start, never reused (R1)."""
    return secrets.token_hex(16)


def is_incarnation_id(value: str) -> bool:
    return bool(_INCARNATION_RE.match(value))


def new_operation_id() -> str:
    """An operation id: 'op_' + a random UUID's hex (assigned at acceptance)."""
    return "op_" + uuid.uuid4().hex


def new_store_id() -> str:
    """A store identity; a restored or copied store must get a new one (§6)."""
    return "st_" + secrets.token_hex(16)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def dispatch_stamp(at: datetime) -> int:
    """A Dispatch's witness stamp (§6): microseconds since the Unix epoch of the
    attempt's ``sent_at``, exact (no float rounding), so the journal's copy of
    the time and the stamp the runner saw are the same number."""
    return (at - _EPOCH) // timedelta(microseconds=1)


def stamp_now() -> int:
    """Now as a dispatch stamp (microseconds since the Unix epoch)."""
    return time.time_ns() // 1000
