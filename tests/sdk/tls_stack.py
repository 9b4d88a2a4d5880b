"""Two real coordinators on 127.0.0.1:0 for the TLS-mismatch tests: one serving TLS
(certificates from ``turnwire certs``), one plaintext; plus a second CA that
signed neither, and a port nothing listens on.

Served from a background event loop (tests/support/background_loop.py); no
runner (a TLS handshake fails before any call reaches the dispatcher).
"""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path
from typing import Any

from tests.support import runner_access
from tests.support.background_loop import BackgroundLoop
from turnwire.certs import CA_CERT, issue_deployment
from turnwire.transport_security import TlsMaterial

TOKEN = "tok-tls-mismatch"


def closed_port_address() -> str:
    """A loopback address nothing listens on (bound, then closed: connection refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"127.0.0.1:{port}"


class TlsPair(BackgroundLoop):
    """``tls_address`` serves TLS signed by ``ca_file``; ``plaintext_address`` serves
    plaintext; ``other_ca_file`` is a CA that signed neither."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self._directory = directory
        self._running: list[Any] = []
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
        from coordinator_svc.app import start_coordinator
        from coordinator_svc.config import CoordinatorConfig
        from coordinator_svc.storage.schema import migrate

        tokens = self._directory / "tokens"
        tokens.write_text(f"alice {hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
        tokens.chmod(0o600)
        for name, tls in (("tls", self._tls), ("plaintext", None)):
            journal_url = f"sqlite:///{self._directory / f'{name}.db'}"
            migrate(journal_url)
            running = await start_coordinator(
                CoordinatorConfig(
                    journal_url=journal_url,
                    tokens_file=str(tokens),
                    tls=tls,
                    runner_credentials=runner_access.CREDENTIALS,
                )
            )
            self._running.append(running)
            if tls is None:
                self.plaintext_address = running.address
            else:
                self.tls_address = running.address

    async def _stop(self) -> None:
        for running in self._running:
            await running.stop()
