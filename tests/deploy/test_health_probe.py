"""`turnwire-<service> health`: where it dials, and what a runner's gate answers it.

The SERVING path of both services runs in tests/packaging/test_deploy_compose.py
(the image's health check, from the wheel); here: the address rules, a runner
that does not list its own name refusing the probe (exit 1, with the fix), and
nothing listening (exit 1).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.conftest import Certs
from turnwire.health_probe import probe_address
from turnwire.launcher import ManagedProcess


@pytest.mark.parametrize(
    ("listen", "expected"),
    [("0.0.0.0:50051", "127.0.0.1:50051"), ("[::]:50061", "[::1]:50061"),
     ("10.0.0.5:9", "10.0.0.5:9"), ("localhost:1", "localhost:1")],
)  # fmt: skip
def test_a_wildcard_listen_address_is_dialled_on_loopback(listen: str, expected: str) -> None:
    assert probe_address(listen, None) == expected


def test_port_zero_is_read_from_the_address_file(tmp_path: Path) -> None:
    """--listen HOST:0 picks its port at start: the probe reads --address-file, and
    without one says so."""
    address_file = tmp_path / "addr"
    address_file.write_text("127.0.0.1:43210\n")
    assert probe_address("0.0.0.0:0", str(address_file)) == "127.0.0.1:43210"
    with pytest.raises(ValueError, match="give --address-file"):
        probe_address("127.0.0.1:0", None)


def _health(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner_svc", "health", *map(str, argv)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.rule("R11")
@pytest.mark.slow
def test_a_runner_that_does_not_serve_its_own_name_refuses_the_probe(
    tmp_path: Path, certs: Certs
) -> None:
    """Its gate stands in front of health (R11): the probe presents the runner's own
    certificate, CN runner-1, which this runner does not list: exit 1, and the probe
    names the fix. Once the runner is gone: exit 1 too."""
    runner = ManagedProcess(
        "runner-1",
        [sys.executable, "-m", "runner_svc", "serve", "--listen", "127.0.0.1:0",
         "--store", str(tmp_path / "r.db"), *certs.flags("runner-1")],
        tmp_path / "runner.log",
        tmp_path / "runner.addr",
    )  # fmt: skip
    try:
        address = runner.start(timeout=60)
        done = _health("--listen", address, *certs.flags("runner-1"))
        assert done.returncode == 1, done.stdout + done.stderr
        assert "PERMISSION_DENIED" in done.stderr
        assert "among its --coordinator-identity values" in done.stderr
    finally:
        runner.terminate()
    gone = _health("--listen", address, *certs.flags("runner-1"), "--timeout", "2")
    assert gone.returncode == 1 and "UNAVAILABLE" in gone.stderr
