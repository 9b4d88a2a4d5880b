"""Who is calling, and may they: the principal behind an ``authorization: Bearer`` token (§7).

The principal always comes from the credentials, never from a request body.
The tokens file (its format, scopes, expiry and mode rules:
``coordinator_svc/api/tokens_file.py``) is read at start and again whenever
it changes (checked every ``RELOAD_POLL_SECONDS``) or on SIGHUP, without a
restart: a new token works, a removed one stops working. A file that cannot
be read or parsed on reload changes nothing: the tokens in force stay, and
an ERROR names the file and the line.

Lookup compares the presented token's digest with every stored digest using
``hmac.compare_digest`` and never stops early, so timing does not reveal how
close a guess came. Then, in this order: an expired token is UNAUTHENTICATED
``CREDENTIALS_EXPIRED``; a token without the call's scope is PERMISSION_DENIED
``SCOPE_MISSING`` (naming the scope it needs).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from coordinator_svc.api.errors import ApiError
from coordinator_svc.api.tokens_file import (
    DEFAULT_SCOPES,
    Scope,
    TokenEntry,
    TokensFileError,
    add_token,
    check_tokens_file_mode,
    load_tokens,
    parse_tokens,
    token_digest,
)
from turnwire.common.v1 import errors_pb2

__all__ = [
    "DEFAULT_SCOPES",
    "Authenticator",
    "Scope",
    "TokenEntry",
    "TokensFileError",
    "add_token",
    "bearer_token",
    "check_tokens_file_mode",
    "load_tokens",
    "parse_tokens",
    "token_digest",
]

log = logging.getLogger("coordinator_svc.auth")

_BEARER = "bearer "
_R = errors_pb2.ErrorReason
RELOAD_POLL_SECONDS = 2.0


def _missing() -> ApiError:
    return ApiError(
        _R.ERROR_REASON_CREDENTIALS_MISSING,
        "missing credentials: send 'authorization: Bearer <token>' metadata",
    )


def _unknown() -> ApiError:
    return ApiError(
        _R.ERROR_REASON_CREDENTIALS_UNKNOWN,
        "unknown credentials",
    )


def _expired() -> ApiError:
    return ApiError(
        _R.ERROR_REASON_CREDENTIALS_EXPIRED,
        "the token has expired: ask for a new one",
    )


def _scope_missing(scope: Scope) -> ApiError:
    return ApiError(
        _R.ERROR_REASON_SCOPE_MISSING,
        f"the token lacks the '{scope}' scope this call needs",
        scope=scope.value,
    )


def _file_state(path: Path) -> tuple[int, int, int] | None:
    """What changes when the file is rewritten (``tokens add`` replaces it), or None."""
    try:
        found = path.stat()
    except OSError:
        return None
    return (found.st_ino, found.st_mtime_ns, found.st_size)


class Authenticator:
    """Maps bearer tokens to principals by digest, and checks expiry and scope."""

    def __init__(
        self,
        entries: Iterable[TokenEntry] = (),
        *,
        source: Path | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._entries = tuple(entries)
        self._source = source
        self._state = _file_state(source) if source is not None else None
        self._clock = clock

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str] | None,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> Authenticator:
        """No file means no principals: every call is refused (fail closed)."""
        if not path:
            return cls((), clock=clock)
        return cls(load_tokens(path), source=Path(path), clock=clock)

    @property
    def principals(self) -> frozenset[str]:
        return frozenset(e.principal for e in self._entries)

    def entry_for_token(self, token: str) -> TokenEntry | None:
        presented = token_digest(token)
        found: TokenEntry | None = None
        for entry in self._entries:  # no early exit: constant work per call
            if hmac.compare_digest(presented, entry.digest) and found is None:
                found = entry
        return found

    def principal_for_token(self, token: str) -> str | None:
        entry = self.entry_for_token(token)
        return entry.principal if entry is not None else None

    def authenticate(
        self, metadata: Sequence[tuple[str, str | bytes]] | None, *scopes: Scope
    ) -> str:
        """The caller's principal, or ApiError: UNAUTHENTICATED (MISSING, UNKNOWN,
        EXPIRED) or PERMISSION_DENIED (SCOPE_MISSING for the first of ``scopes`` the
        token lacks)."""
        token = bearer_token(metadata)
        if token is None:
            raise _missing()
        entry = self.entry_for_token(token)
        if entry is None:
            raise _unknown()
        if entry.expires_at is not None and self._clock() >= entry.expires_at:
            raise _expired()
        for scope in scopes:
            if not entry.allows(scope):
                raise _scope_missing(scope)
        return entry.principal

    # --- reload without a restart --------------------------------------------------

    def reload(self) -> bool:
        """Read the tokens file again. True if the new tokens are in force; False if the
        file could not be used (the old tokens stay, an ERROR says why)."""
        if self._source is None:
            return False
        state = _file_state(self._source)
        try:
            entries = load_tokens(self._source)
        except TokensFileError as exc:
            self._state = state  # report a broken file once, not every poll
            log.error("tokens file not reloaded, the tokens in force stay: %s", exc)
            return False
        self._entries, self._state = entries, state
        log.info(
            "tokens file %s reloaded: %d token(s) for %d principal(s)",
            self._source,
            len(entries),
            len(self.principals),
        )
        return True

    def changed(self) -> bool:
        """Has the tokens file been rewritten since it was last read?"""
        return self._source is not None and _file_state(self._source) != self._state

    async def follow(self, poll_seconds: float = RELOAD_POLL_SECONDS) -> None:
        """Reload whenever the file changes, until cancelled (the coordinator's task)."""
        if self._source is None:
            return
        while True:
            await asyncio.sleep(poll_seconds)
            if self.changed():
                self.reload()


def bearer_token(metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
    """The token of the first ``authorization: Bearer`` header, if any."""
    for key, value in metadata or ():
        if key.lower() != "authorization" or not isinstance(value, str):
            continue
        if value[: len(_BEARER)].lower() == _BEARER:
            token = value[len(_BEARER) :].strip()
            return token or None
    return None
