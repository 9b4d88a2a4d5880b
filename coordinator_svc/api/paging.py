"""Opaque, validated page tokens for ListOperations.

A token is urlsafe base64 (no padding) of ``v2|<created_at iso>|<operation_id>|<check>``
where ``created_at`` is UTC with its offset and ``check`` is the first 16 hex
chars of sha256(principal NUL filter NUL payload); ``filter`` is the sorted,
de-duplicated state names of the request (empty for "all states"). The check
makes a garbled or truncated token, one issued to another principal, or one
minted for another filter fail as PAGE_TOKEN_INVALID instead of silently
listing from the wrong place; so does a forged one whose time is naive or out
of range. ``page_size`` is not bound: it may change from page to page.

It is deliberately not a secret-keyed MAC: a forged cursor only moves the
caller within their *own* operations (the listing is always filtered by
principal), and a keyless token keeps working across restarts and replicas.
v1 tokens (before the filter was bound) are refused: list again from the start.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable
from datetime import UTC, datetime

from coordinator_svc.api.errors import ApiError
from coordinator_svc.core.model import OpState
from coordinator_svc.ports import PageCursor
from turnwire.common.v1 import errors_pb2

_VERSION = "v2"
_MAX_TOKEN_CHARS = 1024


def _filter(states: Iterable[OpState]) -> str:
    return ",".join(sorted({state.value for state in states}))


def _check(principal: str, states: Iterable[OpState], payload: str) -> str:
    bound = "\0".join((principal, _filter(states), payload))
    return hashlib.sha256(bound.encode("utf-8")).hexdigest()[:16]


def _iso(value: datetime) -> str:
    # Journals return aware UTC datetimes (storage.rules.as_utc refuses naive).
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"page cursor time must be timezone-aware, got {value.isoformat()}")
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def encode_page_token(principal: str, cursor: PageCursor, *, states: Iterable[OpState] = ()) -> str:
    """A token for the page after ``cursor`` of ``principal``'s listing filtered by ``states``."""
    payload = f"{_VERSION}|{_iso(cursor.created_at)}|{cursor.operation_id}"
    raw = f"{payload}|{_check(principal, states, payload)}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _invalid() -> ApiError:
    return ApiError(
        errors_pb2.ERROR_REASON_PAGE_TOKEN_INVALID,
        "page_token is not one this coordinator issued to you",
        field="page_token",
    )


def decode_page_token(principal: str, token: str, *, states: Iterable[OpState] = ()) -> PageCursor:
    """The cursor inside ``token``; ApiError PAGE_TOKEN_INVALID unless this coordinator
    issued it to ``principal`` for the same ``states`` filter."""
    if len(token) > _MAX_TOKEN_CHARS:
        raise _invalid()
    try:
        padded = token + "=" * (-len(token) % 4)
        text = base64.urlsafe_b64decode(padded.encode("ascii")).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        raise _invalid() from None
    payload, _, check = text.rpartition("|")
    if not hmac.compare_digest(check.encode(), _check(principal, states, payload).encode()):
        raise _invalid()
    parts = payload.split("|")
    if len(parts) != 3 or parts[0] != _VERSION or not parts[2]:
        raise _invalid()
    try:
        created_at = datetime.fromisoformat(parts[1])
        if created_at.tzinfo is None or created_at.utcoffset() is None:
            raise _invalid()  # naive: its zone would be a guess
        created_at = created_at.astimezone(UTC)  # may overflow near year 1 or 9999
    except (ValueError, OverflowError):
        raise _invalid() from None
    return PageCursor(created_at=created_at, operation_id=parts[2])
