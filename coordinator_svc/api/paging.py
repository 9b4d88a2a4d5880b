"""Opaque, validated page tokens for ListOperations.

A token is urlsafe base64 (no padding) of ``v1|<created_at iso>|<operation_id>|<check>``
where ``check`` is the first 16 hex chars of sha256(principal NUL payload).
The check makes a garbled or truncated token, or one issued to another
principal, fail as PAGE_TOKEN_INVALID instead of silently listing from the
wrong place. It is deliberately not a secret-keyed MAC: a forged cursor only
moves the caller within their *own* operations (the listing is always
filtered by principal), and a keyless token keeps working across restarts and
replicas.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from datetime import UTC, datetime

import grpc

from coordinator_svc.api.errors import ApiError
from coordinator_svc.ports import PageCursor
from turnwire.common.v1 import errors_pb2

_VERSION = "v1"
_MAX_TOKEN_CHARS = 1024


def _check(principal: str, payload: str) -> str:
    digest = hashlib.sha256(principal.encode("utf-8") + b"\0" + payload.encode("utf-8"))
    return digest.hexdigest()[:16]


def _iso(value: datetime) -> str:
    # Keep the journal's own convention (naive UTC or aware) so the cursor
    # compares with stored values exactly as the journal returned them.
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return value.isoformat(timespec="microseconds")


def encode_page_token(principal: str, cursor: PageCursor) -> str:
    payload = f"{_VERSION}|{_iso(cursor.created_at)}|{cursor.operation_id}"
    raw = f"{payload}|{_check(principal, payload)}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _invalid() -> ApiError:
    return ApiError(
        grpc.StatusCode.INVALID_ARGUMENT,
        errors_pb2.ERROR_REASON_PAGE_TOKEN_INVALID,
        "page_token is not one this coordinator issued to you",
        field="page_token",
    )


def decode_page_token(principal: str, token: str) -> PageCursor:
    """The cursor inside ``token``; ApiError PAGE_TOKEN_INVALID if it is not ours."""
    if len(token) > _MAX_TOKEN_CHARS:
        raise _invalid()
    try:
        padded = token + "=" * (-len(token) % 4)
        text = base64.urlsafe_b64decode(padded.encode("ascii")).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        raise _invalid() from None
    payload, _, check = text.rpartition("|")
    if not hmac.compare_digest(check.encode(), _check(principal, payload).encode()):
        raise _invalid()
    parts = payload.split("|")
    if len(parts) != 3 or parts[0] != _VERSION or not parts[2]:
        raise _invalid()
    try:
        created_at = datetime.fromisoformat(parts[1])
    except ValueError:
        raise _invalid() from None
    return PageCursor(created_at=created_at, operation_id=parts[2])
