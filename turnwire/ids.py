"""Identifiers shared by both services (PROTOCOL.md §1)."""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid

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
