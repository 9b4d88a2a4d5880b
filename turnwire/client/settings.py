"""Where a client connects, with which token, trusting which CA.

One implementation for the SDK (``TurnwireClient.from_env()`` and its siblings)
and the ``turnwire`` command (whose flags are the explicit arguments): an
argument wins, then the variable, then the default.

    address   TURNWIRE_ADDRESS                    default 127.0.0.1:50051
    token     TURNWIRE_TOKEN, TURNWIRE_TOKEN_FILE default none (calls are refused)
    ca_file   TURNWIRE_CA_FILE                    default none: plaintext

``turnwire up`` prints these three variables for the deployment it starts.
A CA file that cannot be read or holds no PEM certificate, or a token file
that cannot be read, is :class:`CheckConnectionSettings` before anything is sent.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc

from turnwire.client.failures import CA_OPTION, CheckConnectionSettings

ADDRESS_ENV = "TURNWIRE_ADDRESS"
TOKEN_ENV = "TURNWIRE_TOKEN"
TOKEN_FILE_ENV = "TURNWIRE_TOKEN_FILE"
CA_FILE_ENV = "TURNWIRE_CA_FILE"
DEFAULT_ADDRESS = "127.0.0.1:50051"

_TOKEN_FILE_OPTION = f"--token-file or {TOKEN_FILE_ENV} (Python: token_file=)"

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class ConnectionSettings:
    """The resolved connection: address, token (None: none) and CA file (None: plaintext)."""

    address: str = DEFAULT_ADDRESS
    token: str | None = None
    ca_file: Path | None = None

    @classmethod
    def resolve(
        cls,
        *,
        address: str | None = None,
        token: str | None = None,
        token_file: PathLike | None = None,
        ca_file: PathLike | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> ConnectionSettings:
        """Arguments first, then ``environ`` (default ``os.environ``), then the defaults.

        A token beats a token file; an explicit token file beats TURNWIRE_TOKEN,
        which beats TURNWIRE_TOKEN_FILE. Reads the token file (CheckConnectionSettings
        if it cannot); the CA file is read by the client that uses it.
        """
        env = os.environ if environ is None else environ
        ca = ca_file if ca_file is not None else env.get(CA_FILE_ENV) or None
        return cls(
            address=address or env.get(ADDRESS_ENV) or DEFAULT_ADDRESS,
            token=_token(token, token_file, env),
            ca_file=Path(ca) if ca is not None else None,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """TLS trusting ``ca_file``, or None for plaintext."""
        return None if self.ca_file is None else tls_trusting(self.ca_file)


def _token(token: str | None, token_file: PathLike | None, env: Mapping[str, str]) -> str | None:
    if token:
        return token
    if token_file is not None:
        return read_token_file(Path(token_file))
    if env.get(TOKEN_ENV):
        return env[TOKEN_ENV]
    if env.get(TOKEN_FILE_ENV):
        return read_token_file(Path(env[TOKEN_FILE_ENV]))
    return None


def read_token_file(path: Path) -> str:
    """The token in ``path``, surrounding whitespace dropped."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise CheckConnectionSettings(
            f"cannot read the token file {path} ({_TOKEN_FILE_OPTION}): {why}"
        ) from None
    if not token:
        raise CheckConnectionSettings(f"the token file {path} ({_TOKEN_FILE_OPTION}) is empty")
    return token


def read_ca(path: Path) -> bytes:
    """The PEM certificates in ``path``; CheckConnectionSettings if it is unreadable or
    holds none (gRPC would only say so at the first call, as "unavailable")."""
    try:
        pem = path.read_bytes()
    except OSError as error:
        raise CheckConnectionSettings(
            f"cannot read the CA file {path} ({CA_OPTION}): {error.strerror}"
        ) from None
    try:
        # The standard library parses PEM without any dependency the SDK lacks
        # (it takes an empty text, hence the marker test).
        if b"-----BEGIN CERTIFICATE-----" not in pem:
            raise ValueError("no certificate")
        ssl.create_default_context(cadata=pem.decode("ascii"))
    except (UnicodeDecodeError, ssl.SSLError, ValueError):
        raise CheckConnectionSettings(
            f"the CA file {path} ({CA_OPTION}) holds no PEM certificate: give the CA "
            "that signed the coordinator's certificate, e.g. the ca.pem of `turnwire certs` "
            "or `turnwire up`"
        ) from None
    return pem


def tls_trusting(ca_file: Path) -> grpc.ChannelCredentials:
    """Channel credentials trusting the CA in ``ca_file`` (server TLS; no client certificate)."""
    return grpc.ssl_channel_credentials(root_certificates=read_ca(ca_file))
