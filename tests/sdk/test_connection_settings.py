"""The SDK's connection settings: the TURNWIRE_* variables, and a TLS mismatch reported
as a configuration error naming the CA option, never as "try again later".

Real coordinators (TLS with `turnwire certs` material, and plaintext) on
127.0.0.1; a real closed port for the genuinely unreachable case.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sdk.tls_stack import TOKEN, TlsPair, closed_port_address
from turnwire.client import (
    AsyncTurnwireClient,
    CheckConnectionSettings,
    ConnectionSettings,
    NotFound,
    RetryLater,
    RetryPolicy,
    TurnwireClient,
)

pytestmark = pytest.mark.timeout(90)
UNKNOWN_OPERATION = "op_" + "0" * 32
# Two quick retries: a transient failure would be retried, a configuration error is not.
QUICK = RetryPolicy(attempts=3, initial_backoff=0.05, max_backoff=0.1)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsPair]:
    with TlsPair(tmp_path_factory.mktemp("tls-pair")) as running:
        yield running


def _names_the_ca_option(error: BaseException) -> None:
    message = str(error)
    assert "--ca-file" in message and "TURNWIRE_CA_FILE" in message and "ca_file=" in message


def test_the_right_ca_connects(pair: TlsPair) -> None:
    """The control: ca_file= the CA that signed the coordinator's certificate reaches it
    (an unknown id is NotFound, an answer from the coordinator itself)."""
    with (
        TurnwireClient(pair.tls_address, TOKEN, ca_file=pair.ca_file) as client,
        pytest.raises(NotFound),
    ):
        client.get(UNKNOWN_OPERATION)


def test_a_plaintext_client_of_a_tls_coordinator_is_told_to_give_a_ca(pair: TlsPair) -> None:
    """No CA against a TLS coordinator: CheckConnectionSettings naming --ca-file,
    TURNWIRE_CA_FILE and ca_file=, not RetryLater (gRPC says only "Socket closed";
    the client's one TLS probe tells it apart)."""
    with (
        TurnwireClient(pair.tls_address, TOKEN, retries=QUICK) as client,
        pytest.raises(CheckConnectionSettings, match="speaks TLS") as raised,
    ):
        client.get(UNKNOWN_OPERATION)
        with pytest.raises(CheckConnectionSettings, match="speaks TLS"):
            list(client.watch(UNKNOWN_OPERATION))
    _names_the_ca_option(raised.value)


def test_a_ca_that_did_not_sign_the_certificate_is_named(pair: TlsPair) -> None:
    """A CA that did not sign the coordinator's certificate: CheckConnectionSettings
    (CERTIFICATE_VERIFY_FAILED), naming the CA option."""
    with (
        TurnwireClient(pair.tls_address, TOKEN, ca_file=pair.other_ca_file) as client,
        pytest.raises(CheckConnectionSettings, match="not signed by the CA") as raised,
    ):
        client.get(UNKNOWN_OPERATION)
    _names_the_ca_option(raised.value)


def test_a_tls_client_of_a_plaintext_coordinator_is_told_it_does_not_speak_tls(
    pair: TlsPair,
) -> None:
    """A CA given for a plaintext coordinator: CheckConnectionSettings saying it does
    not speak TLS, naming the CA option to drop."""
    with (
        TurnwireClient(pair.plaintext_address, TOKEN, ca_file=pair.ca_file) as client,
        pytest.raises(CheckConnectionSettings, match="does not speak TLS") as raised,
    ):
        client.get(UNKNOWN_OPERATION)
    _names_the_ca_option(raised.value)


def test_the_asyncio_client_reports_the_same_mismatches(pair: TlsPair) -> None:
    """AsyncTurnwireClient: plaintext to TLS and the wrong CA are CheckConnectionSettings."""

    async def scenario() -> None:
        async with AsyncTurnwireClient(pair.tls_address, TOKEN, retries=QUICK) as plaintext:
            with pytest.raises(CheckConnectionSettings, match="speaks TLS"):
                await plaintext.get(UNKNOWN_OPERATION)
        async with AsyncTurnwireClient(
            pair.tls_address, TOKEN, ca_file=pair.other_ca_file
        ) as wrong:
            with pytest.raises(CheckConnectionSettings, match="not signed by the CA"):
                await wrong.get(UNKNOWN_OPERATION)

    asyncio.run(scenario())


@pytest.mark.parametrize("tls", [False, True])
def test_an_unreachable_coordinator_stays_retry_later(pair: TlsPair, tls: bool) -> None:
    """A port nothing listens on ("Connection refused") is transient, with or without
    TLS: RetryLater after the retries, never a configuration error."""
    ca_file = pair.ca_file if tls else None
    with (
        TurnwireClient(closed_port_address(), TOKEN, retries=QUICK, ca_file=ca_file) as client,
        pytest.raises(RetryLater) as raised,
    ):
        client.get(UNKNOWN_OPERATION)
    assert not isinstance(raised.value, CheckConnectionSettings)
    assert "after 3 attempts" in str(raised.value)


def test_a_ca_file_missing_or_not_pem_is_refused_before_any_call(tmp_path: Path) -> None:
    """ca_file= a path that does not exist, or a file with no PEM certificate (here a
    private key's neighbour: plain text): CheckConnectionSettings at construction."""
    missing = tmp_path / "absent.pem"
    with pytest.raises(CheckConnectionSettings, match="cannot read the CA file") as raised:
        TurnwireClient("127.0.0.1:1", TOKEN, ca_file=missing)
    _names_the_ca_option(raised.value)
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(CheckConnectionSettings, match="holds no PEM certificate"):
        TurnwireClient("127.0.0.1:1", TOKEN, ca_file=garbage)
    empty = tmp_path / "empty.pem"
    empty.write_text("")
    with pytest.raises(CheckConnectionSettings, match="holds no PEM certificate"):
        TurnwireClient.from_env(environ={"TURNWIRE_CA_FILE": str(empty)})


def test_from_env_reads_the_variables_the_cli_reads(pair: TlsPair, tmp_path: Path) -> None:
    """TurnwireClient.from_env(): TURNWIRE_ADDRESS, TURNWIRE_TOKEN_FILE and
    TURNWIRE_CA_FILE reach a TLS coordinator; an argument wins over its variable."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    environ = {
        "TURNWIRE_ADDRESS": pair.tls_address,
        "TURNWIRE_TOKEN_FILE": str(token_file),
        "TURNWIRE_CA_FILE": str(pair.ca_file),
    }
    with TurnwireClient.from_env(environ=environ) as client, pytest.raises(NotFound):
        client.get(UNKNOWN_OPERATION)
    settings = ConnectionSettings.resolve(environ=environ, address="10.0.0.1:9", token="t")
    assert settings == ConnectionSettings("10.0.0.1:9", "t", pair.ca_file)
    assert ConnectionSettings.resolve(environ={}) == ConnectionSettings("127.0.0.1:50051")
