"""The fault tools touch loopback only.

A fault proxy that listened on a public interface, or forwarded to another
host, would let injected faults leak into traffic nobody meant to break.
"""

from __future__ import annotations

import ipaddress

from turnwire.serving import split_host_port


class NonLoopbackAddressError(ValueError):
    """An address the fault tools refuse: not 127.0.0.0/8, ::1 or localhost."""


def require_loopback(address: str, role: str) -> str:
    """Return ``address`` if it is HOST:PORT on loopback, else raise with the reason."""
    try:
        host, _ = split_host_port(address)
    except ValueError as exc:
        raise NonLoopbackAddressError(f"{role} address: {exc}") from None
    if host == "localhost":
        return address
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise NonLoopbackAddressError(
            f"{role} address {address!r} is not loopback: the fault tools only listen on "
            "and forward to 127.0.0.1, ::1 or localhost"
        )
    return address
