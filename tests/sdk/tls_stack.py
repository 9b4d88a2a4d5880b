"""Two real coordinators on 127.0.0.1:0 for the TLS-mismatch tests: one serving TLS
(certificates from ``turnwire certs``), one plaintext; plus a second CA that
signed neither, and a port nothing listens on.

turnwire.testing's in-process Stack, served by a StackThread; no runner (a TLS
handshake fails before any call reaches the dispatcher).
"""

from __future__ import annotations

import socket
from pathlib import Path

from tests.support import runner_access
from turnwire.certs import CA_CERT, issue_deployment
from turnwire.testing.stack import Stack, StackThread
from turnwire.transport_security import TlsMaterial

TOKEN = "tok-tls-mismatch"


def closed_port_address() -> str:
    """A loopback address nothing listens on (bound, then closed: connection refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"127.0.0.1:{port}"


class TlsPair(StackThread):
    """``tls_address`` serves TLS signed by ``ca_file``; ``plaintext_address`` serves
    plaintext; ``other_ca_file`` is a CA that signed neither."""

    def __init__(self, directory: Path) -> None:
        super().__init__(Stack(directory, secret=runner_access.SECRET))
        self._directory = directory
        certs = directory / "certs"
        issue_deployment(certs)
        issue_deployment(directory / "other-certs")
        self.ca_file = certs / CA_CERT
        self.other_ca_file = directory / "other-certs" / CA_CERT
        self._tls = TlsMaterial.from_files(
            certs / "coordinator.pem", certs / "coordinator.key", self.ca_file
        )
        self.tls_address = ""
        self.plaintext_address = ""

    async def _start(self) -> None:
        self.stack.add_token("alice", TOKEN)
        for name, tls in (("tls", self._tls), ("plaintext", None)):
            journal_url = f"sqlite:///{self._directory / f'{name}.db'}"
            running = await self.stack.start_coordinator(
                name=name, journal_url=journal_url, tls=tls
            )
            if tls is None:
                self.plaintext_address = running.address
            else:
                self.tls_address = running.address
