"""One live coordinator and runner for the client tests, over TLS with `turnwire certs`' CA.

Each test module's clients (Go, Java, Node, buf curl) call the same stack, so a
test run starts it once per pytest worker: an in-process runner (echo executor)
and coordinator (tests/sdk/live_stack.py) on 127.0.0.1:0, the coordinator's
public API serving the certificate that `turnwire certs` made, two principals.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sdk.live_stack import OTHER_TOKEN, TOKEN, LiveStack
from turnwire.transport_security import TlsMaterial


@dataclass(frozen=True)
class ClientStack:
    """Where the clients call, and as whom."""

    live: LiveStack
    address: str
    ca_file: Path
    token: str = TOKEN
    other_token: str = OTHER_TOKEN

    def walkthrough_flags(self) -> list[str]:
        """The flags every walkthrough example takes (the same names in each language)."""
        return [
            "--address", self.address,
            "--token", self.token,
            "--other-token", self.other_token,
            "--ca-file", str(self.ca_file),
            "--timeout", "30",
        ]  # fmt: skip


def make_certificates(directory: Path) -> Path:
    """`turnwire certs` for one coordinator; the directory it wrote the CA and keys to."""
    made = subprocess.run(
        [sys.executable, "-m", "turnwire.cli", "certs", "--dir", str(directory),
         "--coordinator", "coordinator"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    return directory


@pytest.fixture(scope="package")
def client_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientStack]:
    certs = make_certificates(tmp_path_factory.mktemp("client-certs") / "tls")
    tls = TlsMaterial.from_files(
        certs / "coordinator.pem", certs / "coordinator.key", certs / "ca.pem"
    )
    with LiveStack(tmp_path_factory.mktemp("client-stack"), tls=tls) as live:
        yield ClientStack(live=live, address=live.address, ca_file=certs / "ca.pem")
