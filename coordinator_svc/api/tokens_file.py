"""The tokens file: who may call the public API, with what scopes, until when (§7, issue 11).

Format (UTF-8 text, one token per line)::

    # comments and blank lines are ignored
    <principal> <sha256 of the token, 64 lowercase hex> [scopes=S,S,...] [expires=WHEN]

- A principal is 1..128 characters from ``A-Z a-z 0-9 . _ - @ :``; it may
  have several lines (token rotation: the old and the new token both work
  until the old line is removed).
- ``scopes``: any of ``submit`` (SubmitTurn, SubmitAndWatch), ``read``
  (GetOperation, ListOperations, WatchOperation; SubmitAndWatch needs it too),
  ``cancel`` (CancelOperation) and ``admin`` (every scope, and the operator's
  AdminService: docs/ADMIN_API.md). A line without
  ``scopes=`` (the format before issue 11) has submit, read and cancel.
- ``expires``: an ISO 8601 time with its offset (``2027-01-31T00:00:00Z``);
  from then on the token is refused as expired. Without it, it never expires.

Only digests are stored, never raw tokens: ``python -m coordinator_svc tokens
add --file F --principal P [--scope S]... [--expires-in 30d]`` makes a fresh
random token, prints it once and appends its line.

File mode: a tokens file that group or others may write (anyone who can write
it can mint a principal) or that others may read (who holds which principal is
nobody else's business) is refused. Owner-only (``chmod 600``, what ``tokens
add`` writes) is the default; group-readable (``chmod 640``) is accepted so a
service group can be given read access.
"""

from __future__ import annotations

import enum
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

_PRINCIPAL_RE = re.compile(r"\A[A-Za-z0-9._@:\-]{1,128}\Z")
_DIGEST_RE = re.compile(r"\A[0-9a-f]{64}\Z")


class TokensFileError(ValueError):
    """The tokens file cannot be read or has a malformed line."""


class Scope(enum.StrEnum):
    SUBMIT = "submit"
    READ = "read"
    CANCEL = "cancel"
    ADMIN = "admin"


# What a line without ``scopes=`` grants: everything a tenant does, nothing more.
DEFAULT_SCOPES: frozenset[Scope] = frozenset({Scope.SUBMIT, Scope.READ, Scope.CANCEL})


@dataclass(frozen=True)
class TokenEntry:
    principal: str
    digest: str
    scopes: frozenset[Scope] = DEFAULT_SCOPES
    expires_at: datetime | None = None

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes or Scope.ADMIN in self.scopes

    def line(self) -> str:
        fields = [self.principal, self.digest]
        if self.scopes != DEFAULT_SCOPES:
            fields.append("scopes=" + ",".join(sorted(self.scopes)))
        if self.expires_at is not None:
            fields.append("expires=" + self.expires_at.isoformat())
        return " ".join(fields)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_scopes(text: str) -> frozenset[Scope]:
    """``submit,read`` -> scopes; ValueError naming an unknown one or an empty list."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError("scopes= names no scope")
    try:
        return frozenset(Scope(name) for name in names)
    except ValueError:
        unknown = sorted(n for n in names if n not in {s.value for s in Scope})
        known = ", ".join(s.value for s in Scope)
        raise ValueError(f"unknown scope {', '.join(unknown)} (known: {known})") from None


def parse_expiry(text: str) -> datetime:
    """An ISO 8601 time with an offset; ValueError for a naive or malformed one."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"expires={text!r} is not an ISO 8601 time") from None
    if when.tzinfo is None:
        raise ValueError(f"expires={text!r} needs an offset, e.g. {text}Z or {text}+00:00")
    return when


def _entry(parts: list[str]) -> TokenEntry:
    if len(parts) < 2:
        raise ValueError("expected '<principal> <sha256 hex> [scopes=...] [expires=...]'")
    principal, digest, *options = parts
    if not _PRINCIPAL_RE.match(principal):
        raise ValueError(f"invalid principal {principal!r}")
    if not _DIGEST_RE.match(digest):
        raise ValueError("digest must be 64 lowercase hex chars")
    scopes, expires_at = DEFAULT_SCOPES, None
    seen: set[str] = set()
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or key not in ("scopes", "expires") or key in seen:
            raise ValueError(f"unexpected field {option!r} (scopes=... and expires=..., once each)")
        seen.add(key)
        if key == "scopes":
            scopes = parse_scopes(value)
        else:
            expires_at = parse_expiry(value)
    return TokenEntry(principal, digest, scopes, expires_at)


def parse_tokens(text: str, source: str = "tokens file") -> tuple[TokenEntry, ...]:
    """Parse the format above; raise TokensFileError naming the line."""
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            entries.append(_entry(line.split()))
        except ValueError as exc:
            raise TokensFileError(f"{source}:{number}: {exc}") from None
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


def add_token(
    path: str | os.PathLike[str],
    principal: str,
    *,
    scopes: Iterable[Scope] = DEFAULT_SCOPES,
    expires_at: datetime | None = None,
) -> str:
    """Append a fresh token's line for ``principal``; return the raw token (shown once)."""
    if not _PRINCIPAL_RE.match(principal):
        raise TokensFileError(f"invalid principal {principal!r}: use 1..128 of A-Za-z0-9._@:-")
    granted = frozenset(scopes)
    if not granted:
        raise TokensFileError("a token needs at least one scope")
    if expires_at is not None and expires_at.tzinfo is None:
        raise TokensFileError("an expiry needs a time zone")
    target = Path(path)
    # The mode is not checked here: the rewrite below is owner-only, which fixes it.
    existing = load_tokens(target, check_mode=False) if target.exists() else ()
    token = "tw_" + secrets.token_urlsafe(32)
    entries = [*existing, TokenEntry(principal, token_digest(token), granted, expires_at)]
    header = "# turnwire tokens: <principal> <sha256 hex of token> [scopes=...] [expires=...]\n"
    tmp = target.with_name(target.name + ".tmp")
    # Readable by the owner only: digests are not secrets, but who holds
    # which principal is nobody else's business.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(header + "\n".join(e.line() for e in entries) + "\n")
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(target)  # atomic: a starting (or reloading) coordinator never reads half a file
    return token
