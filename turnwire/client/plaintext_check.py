"""Telling a plaintext client that its coordinator speaks TLS.

gRPC's words do not tell: a TLS coordinator closes a plaintext connection at
once, and the client sees "Socket closed", as from a coordinator that went
away mid-connection. So after such a failure a client that dialled in
plaintext tries one TLS handshake with the address (the standard library's,
no certificate checked, nothing sent after it, bounded in time). Only if that
handshake completes is the failure a configuration error
(:class:`CheckConnectionSettings`); an address that refuses, resets, stays
silent or answers in plaintext is left as gRPC reported it (transient:
RetryLater after the retries). Each client probes at most once.
"""

from __future__ import annotations

import re
import socket
import ssl

import grpc

from turnwire.client.failures import (
    CA_OPTION,
    CheckConnectionSettings,
    status_code,
    status_details,
)
from turnwire.errors import error_info

PROBE_SECONDS = 2.0
# HOST:PORT, [V6]:PORT, with gRPC's optional dns:/// or ipv4:/ipv6: scheme.
_ADDRESS = re.compile(r"^(?:dns:(?:///)?|ipv4:|ipv6:)?(\[[^\]]+\]|[^:/\[\]]+):(\d{1,5})$")


def host_and_port(address: str) -> tuple[str, int] | None:
    """The host and port of a gRPC target, or None when it is not one (unix:, lists...)."""
    match = _ADDRESS.match(address.strip())
    if match is None:
        return None
    return match.group(1).strip("[]"), int(match.group(2))


def speaks_tls(address: str, timeout: float = PROBE_SECONDS) -> bool:
    """True if a TLS handshake with ``address`` completes (certificate not checked)."""
    target = host_and_port(address)
    if target is None:
        return False
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only "is this TLS?"; nothing is sent after
    context.set_alpn_protocols(["h2"])
    try:
        with (
            socket.create_connection(target, timeout=timeout) as raw,
            context.wrap_socket(raw),
        ):
            return True
    except (OSError, ValueError):  # ssl.SSLError is an OSError
        return False


class PlaintextCheck:
    """The one probe of a client that dialled ``address`` in plaintext (``armed``)."""

    def __init__(self, address: str, *, armed: bool) -> None:
        self._address = address
        self._armed = armed
        self._speaks_tls: bool | None = None

    def wants_probe(self, error: grpc.RpcError) -> bool:
        """A plaintext call closed by the server before any answer: probe (once) to
        learn whether it speaks TLS."""
        if not self._armed or self._speaks_tls is False:
            return False
        if status_code(error) is not grpc.StatusCode.UNAVAILABLE or error_info(error) is not None:
            return False
        return "Socket closed" in status_details(error)

    def probe(self) -> CheckConnectionSettings | None:
        """Blocking (at most PROBE_SECONDS): the configuration error, or None."""
        if self._speaks_tls is None:
            self._speaks_tls = speaks_tls(self._address)
        if not self._speaks_tls:
            return None
        return CheckConnectionSettings(
            f"the coordinator at {self._address} speaks TLS and this client connects in "
            f"plaintext: give the CA that signed its certificate with {CA_OPTION}, e.g. "
            "the ca.pem of `turnwire certs` or `turnwire up`",
            code=grpc.StatusCode.UNAVAILABLE,
        )
