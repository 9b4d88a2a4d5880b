"""`turnwire` against a coordinator whose TLS does not fit its settings: exit 11 and one
line naming --ca-file and TURNWIRE_CA_FILE, never "unavailable, try again later".

Real coordinators (tests/sdk/tls_stack.py: one TLS with `turnwire certs` material,
one plaintext) and a real closed port for the unreachable case.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import turnwire.cli as cli
from tests.sdk.tls_stack import TOKEN, TlsPair, closed_port_address
from turnwire.cli.exit_codes import ExitCode

pytestmark = pytest.mark.timeout(90)
UNKNOWN_OPERATION = "op_" + "0" * 32


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsPair]:
    with TlsPair(tmp_path_factory.mktemp("cli-tls-pair")) as running:
        yield running


def _get(address: str, *extra: str) -> int:
    return cli.main(["get", UNKNOWN_OPERATION, "--address", address, "--token", TOKEN, *extra])


def _one_configuration_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "connection misconfigured" in err and "try again later" not in err, err
    assert "--ca-file" in err and "TURNWIRE_CA_FILE" in err, err
    return err


def test_each_tls_mismatch_exits_11_naming_the_ca_option(
    pair: TlsPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Plaintext to TLS, a CA that did not sign the certificate, TLS to plaintext, a
    --ca-file that does not exist or is not PEM: exit 11, one line each."""
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate\n")
    cases = [
        ((pair.tls_address,), "speaks TLS"),
        ((pair.tls_address, "--ca-file", str(pair.other_ca_file)), "not signed by the CA"),
        ((pair.plaintext_address, "--ca-file", str(pair.ca_file)), "does not speak TLS"),
        ((pair.tls_address, "--ca-file", str(tmp_path / "absent.pem")), "cannot read the CA"),
        ((pair.tls_address, "--ca-file", str(garbage)), "holds no PEM certificate"),
    ]
    for (address, *extra), words in cases:
        assert _get(address, *extra) == ExitCode.CONFIGURATION == 11, words
        assert words in _one_configuration_line(capsys.readouterr().err)
    assert _get(pair.tls_address, "--ca-file", str(pair.ca_file)) == ExitCode.NOT_FOUND


def test_an_unreachable_coordinator_still_exits_7(
    pair: TlsPair, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port nothing listens on, with or without --ca-file: exit 7, try again later."""
    for extra in ((), ("--ca-file", str(pair.ca_file))):
        assert _get(closed_port_address(), "--retries", "0", *extra) == ExitCode.UNAVAILABLE
        assert "try again later" in capsys.readouterr().err


def test_the_process_prints_one_line_for_a_wrong_ca(pair: TlsPair) -> None:
    """As a user runs it (a process, TURNWIRE_CA_FILE set): exit 11, and stderr is the
    one line; gRPC's own handshake log stays out of it."""
    done = subprocess.run(
        [sys.executable, "-m", "turnwire.cli", "get", UNKNOWN_OPERATION],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith(("TURNWIRE_", "GRPC_"))},
            "TURNWIRE_ADDRESS": pair.tls_address,
            "TURNWIRE_TOKEN": TOKEN,
            "TURNWIRE_CA_FILE": str(pair.other_ca_file),
        },
    )
    assert done.returncode == 11, done.stderr
    assert "not signed by the CA" in _one_configuration_line(done.stderr)
