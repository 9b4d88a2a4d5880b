"""Who is calling: the principal behind an ``authorization: Bearer`` token (§7).

The principal always comes from the credentials, never from a request body.

Tokens file format (UTF-8 text, one token per line)::

    # comments and blank lines are ignored
    <principal> <sha256 of the token, 64 lowercase hex chars>

A principal is 1..128 characters from ``A-Z a-z 0-9 . _ - @ :``; it may have
several lines (token rotation). Only digests are stored, never raw tokens:
``python -m coordinator_svc tokens add --file F --principal P`` makes a fresh
random token, prints it once and appends its digest. The file is read at
start; restart the coordinator after changing it.

File mode: the coordinator refuses to start on a tokens file that group or
others may write (anyone who can write it can mint a principal) or that others
may read (who holds which principal is nobody else's business). Owner-only
(``chmod 600``, what ``tokens add`` writes) is the default; group-readable
(``chmod 640``) is accepted so a service group can be given read access.

Lookup compares the presented token's digest with every stored digest using
``hmac.compare_digest`` and never stops early, so timing does not reveal how
close a guess came.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from coordinator_svc.api.errors import ApiError
from turnwire.common.v1 import errors_pb2

_PRINCIPAL_RE = re.compile(r"\A[A-Za-z0-9._@:\-]{1,128}\Z")
_DIGEST_RE = re.compile(r"\A[0-9a-f]{64}\Z")
_BEARER = "bearer "
_R = errors_pb2.ErrorReason


class TokensFileError(ValueError):
    """The tokens file cannot be read or has a malformed line."""


@dataclass(frozen=True)
class TokenEntry:
    principal: str
    digest: str


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_tokens(text: str, source: str = "tokens file") -> tuple[TokenEntry, ...]:
    """Parse the tokens file format above; raise TokensFileError naming the line."""
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise TokensFileError(f"{source}:{number}: expected '<principal> <sha256 hex>'")
        principal, digest = parts
        if not _PRINCIPAL_RE.match(principal):
            raise TokensFileError(f"{source}:{number}: invalid principal {principal!r}")
        if not _DIGEST_RE.match(digest):
            raise TokensFileError(f"{source}:{number}: digest must be 64 lowercase hex chars")
        entries.append(TokenEntry(principal, digest))
    return tuple(entries)


# Group or others may write, or others may read: refused (see the module docstring).
_UNSAFE_MODE_BITS = stat.S_IWGRP | stat.S_IWOTH | stat.S_IROTH


def check_tokens_file_mode(path: str | os.PathLike[str]) -> None:
    """Raise TokensFileError, naming the file and the fix, if its mode is unsafe."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError as exc:
        raise TokensFileError(f"cannot read tokens file {path}: {exc.strerror}") from exc
    if not mode & _UNSAFE_MODE_BITS:
        return
    problems = []
    writers = [
        who for bit, who in ((stat.S_IWGRP, "group"), (stat.S_IWOTH, "others")) if mode & bit
    ]
    if writers:
        problems.append("writable by " + " and ".join(writers))
    if mode & stat.S_IROTH:
        problems.append("readable by others")
    raise TokensFileError(
        f"tokens file {path} has mode {mode:03o} ({', '.join(problems)}); "
        f"refusing to use it: run `chmod 600 {path}` (or `chmod 640 {path}` "
        "to let its group read it)"
    )


def load_tokens(path: str | os.PathLike[str], *, check_mode: bool = True) -> tuple[TokenEntry, ...]:
    """The entries of the tokens file; TokensFileError if unreadable, malformed or (with
    ``check_mode``) writable by group or others, or readable by others."""
    if check_mode:
        check_tokens_file_mode(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TokensFileError(f"cannot read tokens file {path}: {exc.strerror}") from exc
    return parse_tokens(text, str(path))


def add_token(path: str | os.PathLike[str], principal: str) -> str:
    """Append a fresh token's digest for ``principal``; return the raw token (shown once)."""
    if not _PRINCIPAL_RE.match(principal):
        raise TokensFileError(f"invalid principal {principal!r}: use 1..128 of A-Za-z0-9._@:-")
    target = Path(path)
    # The mode is not checked here: the rewrite below is owner-only, which fixes it.
    existing = load_tokens(target, check_mode=False) if target.exists() else ()
    token = "tw_" + secrets.token_urlsafe(32)
    lines = [f"{e.principal} {e.digest}" for e in existing]
    lines.append(f"{principal} {token_digest(token)}")
    header = "# turnwire tokens: <principal> <sha256 hex of token>\n"
    tmp = target.with_name(target.name + ".tmp")
    # Readable by the owner only: digests are not secrets, but who holds
    # which principal is nobody else's business.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(header + "\n".join(lines) + "\n")
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(target)  # atomic: a starting coordinator never reads half a file
    return token


def _missing() -> ApiError:
    return ApiError(
        grpc.StatusCode.UNAUTHENTICATED,
        _R.ERROR_REASON_CREDENTIALS_MISSING,
        "missing credentials: send 'authorization: Bearer <token>' metadata",
    )


def _unknown() -> ApiError:
    return ApiError(
        grpc.StatusCode.UNAUTHENTICATED,
        _R.ERROR_REASON_CREDENTIALS_UNKNOWN,
        "unknown credentials",
    )


class Authenticator:
    """Maps bearer tokens to principals by digest."""

    def __init__(self, entries: Iterable[TokenEntry] = ()) -> None:
        self._entries = tuple(entries)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str] | None) -> Authenticator:
        """No file means no principals: every call is refused (fail closed)."""
        return cls(load_tokens(path) if path else ())

    @property
    def principals(self) -> frozenset[str]:
        return frozenset(e.principal for e in self._entries)

    def principal_for_token(self, token: str) -> str | None:
        presented = token_digest(token)
        found: str | None = None
        for entry in self._entries:  # no early exit: constant work per call
            if hmac.compare_digest(presented, entry.digest) and found is None:
                found = entry.principal
        return found

    def authenticate(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> str:
        """The caller's principal, or ApiError UNAUTHENTICATED (MISSING / UNKNOWN)."""
        token = bearer_token(metadata)
        if token is None:
            raise _missing()
        principal = self.principal_for_token(token)
        if principal is None:
            raise _unknown()
        return principal


def bearer_token(metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
    """The token of the first ``authorization: Bearer`` header, if any."""
    for key, value in metadata or ():
        if key.lower() != "authorization" or not isinstance(value, str):
            continue
        if value[: len(_BEARER)].lower() == _BEARER:
            token = value[len(_BEARER) :].strip()
            return token or None
    return None
