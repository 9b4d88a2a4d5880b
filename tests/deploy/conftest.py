"""Fixtures for the deployment tests: a clean TURNWIRE_* environment, real certificates."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from turnwire.certs import issue_deployment


@pytest.fixture(autouse=True)
def _no_turnwire_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The parsers read TURNWIRE_* defaults: none of the machine's may leak in."""
    for name in [n for n in os.environ if n.startswith("TURNWIRE_")]:
        monkeypatch.delenv(name)
    yield


@dataclass(frozen=True)
class Certs:
    directory: Path

    def cert(self, name: str) -> Path:
        return self.directory / f"{name}.pem"

    def key(self, name: str) -> Path:
        return self.directory / f"{name}.key"

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    def flags(self, name: str) -> list[str]:
        return ["--tls-cert", str(self.cert(name)), "--tls-key", str(self.key(name)),
                "--tls-ca", str(self.ca)]  # fmt: skip


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A deployment CA, a coordinator and two runners (``turnwire certs``' own code)."""
    directory = tmp_path_factory.mktemp("certs") / "tls"
    issue_deployment(directory, coordinators=["coordinator"], runners=["runner-1", "runner-2"])
    return Certs(directory)


@pytest.fixture(scope="session")
def other_certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """Another deployment's CA and certificates (they chain to a CA ours do not trust)."""
    directory = tmp_path_factory.mktemp("other-certs") / "tls"
    issue_deployment(directory, coordinators=["coordinator"], runners=["runner-1"])
    return Certs(directory)


@pytest.fixture(scope="session")
def expired_certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """Certificates issued two years ago for one year: expired a year ago."""
    directory = tmp_path_factory.mktemp("expired-certs") / "tls"
    issued = dt.datetime.now(dt.UTC) - dt.timedelta(days=730)
    issue_deployment(
        directory, coordinators=["coordinator"], runners=["runner-1"], days=365, now=issued
    )
    return Certs(directory)
