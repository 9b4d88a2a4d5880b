"""How a coordinator and its runners know each other, and what may travel in clear (issue 11).

A runner obeys only its coordinator. It knows who is calling in one of two ways:

- **mutual TLS**: the caller's certificate must chain to the deployment CA
  (the TLS handshake checks that) and its subject CN must be one of the
  runner's coordinator identities (``coordinator`` unless configured). The
  identity is read only from the TLS auth context, never from a request.
- **a shared secret**, when TLS is off: the runner is started with a secret
  file and every call must carry the same secret in the ``x-turnwire-runner-secret``
  metadata header. Plaintext is allowed on loopback only, so the secret never
  crosses a network.

Nothing here decides what a refused call gets: that is the runner's gate
(``runner_svc/transport/access.py``). This module holds the material and the
rules both sides share (the files, their modes, the loopback rule, what a
client presents) and imports no gRPC, so configuration may hold it;
``turnwire/secure_channels.py`` turns it into gRPC credentials and channels.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

SECRET_HEADER = "x-turnwire-runner-secret"
# Long enough that guessing is hopeless; new_secret() makes 43 characters.
MIN_SECRET_CHARS = 16
DEFAULT_COORDINATOR_IDENTITIES: frozenset[str] = frozenset({"coordinator"})
# A secret or private key file that group or others may read or write is refused:
# whoever can read it can act as the coordinator.
_UNSAFE_SECRET_BITS = stat.S_IRWXG | stat.S_IRWXO


class SecurityConfigError(ValueError):
    """Transport-security settings that cannot be used (named file, flag and fix)."""


def is_loopback_host(host: str) -> bool:
    """127.0.0.0/8, ::1 or ``localhost``: traffic that never leaves this machine."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_loopback_for_plaintext(address: str, role: str) -> None:
    """Raise SecurityConfigError unless ``address`` (HOST:PORT) is on loopback."""
    host = address.rpartition(":")[0]
    if not is_loopback_host(host):
        raise SecurityConfigError(
            f"{role} {address!r} is not a loopback address: plaintext is allowed only on "
            "127.0.0.1, ::1 or localhost; give --tls-cert, --tls-key and --tls-ca instead"
        )


def check_runner_address(credentials: RunnerCredentials, address: str) -> None:
    """Raise SecurityConfigError unless ``credentials`` may reach a runner at ``address``:
    mutual TLS reaches any address; plaintext (a shared secret) loopback only."""
    if credentials.tls is None:
        require_loopback_for_plaintext(address, "runner address")


def check_private_file(path: Path, what: str) -> None:
    """Refuse a secret or key file that group or others may read or write."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError as exc:
        raise SecurityConfigError(f"cannot read {what} {path}: {exc.strerror}") from exc
    if mode & _UNSAFE_SECRET_BITS:
        raise SecurityConfigError(
            f"{what} {path} has mode {mode:03o}: group or others may read or write it; "
            f"refusing to use it: run `chmod 600 {path}`"
        )


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SecurityConfigError(f"cannot read {what} {path}: {exc.strerror}") from exc


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def write_secret_file(path: Path) -> str:
    """Write a fresh secret to ``path`` (owner-only, atomic) and return it."""
    secret = new_secret()
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(secret + "\n")
    tmp.replace(path)
    return secret


def read_secret_file(path: Path) -> str:
    """The secret in ``path`` (surrounding whitespace stripped), after the mode check."""
    check_private_file(path, "secret file")
    secret = _read(path, "secret file").decode("utf-8", "replace").strip()
    if len(secret) < MIN_SECRET_CHARS or not secret.isprintable() or " " in secret:
        raise SecurityConfigError(
            f"secret file {path} must hold one line of at least {MIN_SECRET_CHARS} "
            "printable characters without spaces (make one: "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return secret


@dataclass(frozen=True, repr=False)
class TlsMaterial:
    """A certificate chain, its private key and the CA that peers must chain to (PEM)."""

    cert_chain: bytes
    private_key: bytes
    ca: bytes

    @classmethod
    def from_files(cls, cert: Path, key: Path, ca: Path) -> TlsMaterial:
        check_private_file(key, "TLS private key")
        return cls(_read(cert, "TLS certificate"), _read(key, "TLS key"), _read(ca, "TLS CA"))

    def __repr__(self) -> str:  # never print a key
        return "TlsMaterial(<pem>)"


def tls_from_flags(cert: str | None, key: str | None, ca: str | None) -> TlsMaterial | None:
    """--tls-cert/--tls-key/--tls-ca: all three, or none (None)."""
    given = {"--tls-cert": cert, "--tls-key": key, "--tls-ca": ca}
    if not any(given.values()):
        return None
    missing = [flag for flag, value in given.items() if not value]
    if missing:
        raise SecurityConfigError(f"TLS needs all of --tls-cert, --tls-key and --tls-ca: {missing}")
    assert cert and key and ca
    return TlsMaterial.from_files(Path(cert), Path(key), Path(ca))


def _check_one_of(secret: str | None, tls: TlsMaterial | None, who: str) -> None:
    if (secret is None) == (tls is None):
        raise SecurityConfigError(
            f"{who} needs exactly one of: TLS material (mutual TLS), or a shared secret "
            "(plaintext, loopback only)"
        )
    if secret is not None and len(secret) < MIN_SECRET_CHARS:
        raise SecurityConfigError(f"a runner secret has at least {MIN_SECRET_CHARS} characters")


@dataclass(frozen=True, repr=False)
class RunnerAccess:
    """What a runner demands of every caller: one of the two ways above."""

    secret: str | None = None
    tls: TlsMaterial | None = None
    coordinator_identities: frozenset[str] = field(
        default_factory=lambda: DEFAULT_COORDINATOR_IDENTITIES
    )

    def __post_init__(self) -> None:
        _check_one_of(self.secret, self.tls, "a runner")
        if self.tls is not None and not self.coordinator_identities:
            raise SecurityConfigError("mutual TLS needs at least one coordinator identity")

    def __repr__(self) -> str:
        mode = "mutual TLS" if self.tls is not None else "shared secret"
        return f"RunnerAccess({mode})"


@dataclass(frozen=True, repr=False)
class RunnerCredentials:
    """What a coordinator (or an operator's tool) presents to runners."""

    secret: str | None = None
    tls: TlsMaterial | None = None

    def __post_init__(self) -> None:
        _check_one_of(self.secret, self.tls, "a runner client")

    @classmethod
    def for_access(cls, access: RunnerAccess) -> RunnerCredentials:
        """The credentials a runner configured with ``access`` accepts (tests, local tools:
        with TLS this presents the runner's own certificate, so the runner must list
        its CN among its coordinator identities)."""
        return cls(secret=access.secret, tls=access.tls)

    @property
    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        """Metadata each call carries: the secret in plaintext mode, nothing with TLS."""
        return ((SECRET_HEADER, self.secret),) if self.secret is not None else ()

    def __repr__(self) -> str:
        mode = "mutual TLS" if self.tls is not None else "shared secret"
        return f"RunnerCredentials({mode})"
