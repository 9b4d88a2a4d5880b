"""`turnwire certs` (turnwire/certs.py): real files in tmp_path, real mTLS on 127.0.0.1."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import json
import stat
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

import turnwire.cli as cli
from turnwire.certs import (
    CA_CERT,
    CA_KEY,
    CertsError,
    identity_of,
    issue_deployment,
)

pytestmark = pytest.mark.timeout(60)

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
WHOAMI = "/turnwire.test.Peer/WhoAmI"


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def assert_signed_by(leaf: x509.Certificate, ca: x509.Certificate) -> None:
    public_key = ca.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    assert leaf.signature_hash_algorithm is not None
    # Raises InvalidSignature when the CA did not sign this leaf.
    public_key.verify(
        leaf.signature, leaf.tbs_certificate_bytes, ec.ECDSA(leaf.signature_hash_algorithm)
    )
    assert leaf.issuer == ca.subject


def cn(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


# 1. what is in the certificates


def test_ca_and_leaves_parse_verify_and_carry_the_specified_extensions(tmp_path: Path) -> None:
    """CA: self-signed CA, path length 0; leaves: signed by it, CN, SANs, EKU, not a CA."""
    directory = tmp_path / "tls"
    issued = issue_deployment(
        directory,
        coordinators=["coordinator"],
        runners=["runner-1", "runner-2"],
        hosts=["coord.internal", "10.0.0.5"],
        days=30,
        now=NOW,
    )
    assert not issued.ca_reused and issued.reused == ()
    ca = load(directory / CA_CERT)
    assert cn(ca) == "Turnwire deployment CA"
    assert_signed_by(ca, ca)
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    assert not usage.value.digital_signature
    ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    ca_public_key = ca.public_key()
    assert isinstance(ca_public_key, ec.EllipticCurvePublicKey)
    assert ca_public_key.curve.name == "secp256r1"

    for role, name in [
        ("coordinator", "coordinator"),
        ("runner", "runner-1"),
        ("runner", "runner-2"),
    ]:
        leaf = load(directory / f"{name}.pem")
        assert_signed_by(leaf, ca)
        assert cn(leaf) == name == identity_of((directory / f"{name}.pem").read_bytes())
        public_key = leaf.public_key()
        assert isinstance(public_key, ec.EllipticCurvePublicKey)
        assert public_key.curve.name == "secp256r1"
        assert leaf.signature_hash_algorithm is not None
        assert leaf.signature_hash_algorithm.name == "sha256"
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert sans.get_values_for_type(x509.DNSName) == ["localhost", "coord.internal"]
        assert sans.get_values_for_type(x509.IPAddress) == [
            ipaddress.ip_address("127.0.0.1"),
            ipaddress.ip_address("::1"),
            ipaddress.ip_address("10.0.0.5"),
        ]
        assert sans.get_values_for_type(x509.UniformResourceIdentifier) == [
            f"urn:turnwire:{role}:{name}"
        ]
        eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
        constraints = leaf.extensions.get_extension_for_class(x509.BasicConstraints)
        assert constraints.critical and not constraints.value.ca
        usage = leaf.extensions.get_extension_for_class(x509.KeyUsage)
        assert usage.critical and usage.value.digital_signature and not usage.value.key_cert_sign
        aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
        ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        assert aki.key_identifier == ski.digest
        # now - 5 minutes for clock skew; now + days.
        assert leaf.not_valid_before_utc == NOW - dt.timedelta(minutes=5)
        assert leaf.not_valid_after_utc == NOW + dt.timedelta(days=30)
    assert (
        load(directory / "runner-1.pem").serial_number
        != load(directory / "runner-2.pem").serial_number
    )


# 2. file and directory modes


def test_keys_are_0600_certificates_0644_and_the_directory_0700(tmp_path: Path) -> None:
    """Every private key is 0o600, every certificate 0o644, the new directory 0o700."""
    directory = tmp_path / "new" / "tls"
    issued = issue_deployment(directory, now=NOW)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    names = sorted(p.name for p in directory.iterdir())
    assert names == sorted(
        ["ca.pem", "ca.key", "coordinator.pem", "coordinator.key", "runner-1.pem", "runner-1.key"]
    )  # and no temporary files left behind
    assert {f.path.name for f in issued.written} == set(names)
    for path in directory.iterdir():
        expected = 0o600 if path.suffix == ".key" else 0o644
        assert stat.S_IMODE(path.stat().st_mode) == expected, path
    assert all(f.private == (f.path.suffix == ".key") for f in issued.written)


# 3. reusing the CA


def test_a_second_call_with_a_new_runner_reuses_the_ca(tmp_path: Path) -> None:
    """ca.pem/ca.key unchanged, the result says reused, the new leaf verifies against it."""
    issue_deployment(tmp_path, now=NOW)
    ca_bytes, ca_key_bytes = (tmp_path / CA_CERT).read_bytes(), (tmp_path / CA_KEY).read_bytes()
    issued = issue_deployment(tmp_path, coordinators=[], runners=["runner-3"], now=NOW)
    assert issued.ca_reused
    assert issued.reused == (tmp_path / CA_CERT, tmp_path / CA_KEY)
    assert [f.path.name for f in issued.written] == ["runner-3.key", "runner-3.pem"]
    assert (tmp_path / CA_CERT).read_bytes() == ca_bytes
    assert (tmp_path / CA_KEY).read_bytes() == ca_key_bytes
    assert_signed_by(load(tmp_path / "runner-3.pem"), load(tmp_path / CA_CERT))


def test_half_a_ca_is_an_error_naming_the_missing_file(tmp_path: Path) -> None:
    """Only ca.pem present: CertsError names ca.key, and nothing is written."""
    issue_deployment(tmp_path, coordinators=[], runners=[], now=NOW)
    (tmp_path / CA_KEY).unlink()
    with pytest.raises(CertsError, match=r"ca\.key"):
        issue_deployment(tmp_path, now=NOW)
    assert [p.name for p in tmp_path.iterdir()] == [CA_CERT]


# 4. overwriting a leaf


def test_an_existing_leaf_is_replaced_only_with_overwrite(tmp_path: Path) -> None:
    """Without overwrite: CertsError naming the file and --force, bytes unchanged; with it: new."""
    issue_deployment(tmp_path, now=NOW)
    before = {name: (tmp_path / name).read_bytes() for name in ("runner-1.pem", "runner-1.key")}
    with pytest.raises(CertsError, match=r"runner-1\.(pem|key).*--force"):
        issue_deployment(tmp_path, coordinators=[], runners=["runner-1"], now=NOW)
    for name, data in before.items():
        assert (tmp_path / name).read_bytes() == data

    issued = issue_deployment(
        tmp_path, coordinators=[], runners=["runner-1"], overwrite=True, now=NOW
    )
    assert issued.ca_reused
    for name, data in before.items():
        assert (tmp_path / name).read_bytes() != data
    assert stat.S_IMODE((tmp_path / "runner-1.key").stat().st_mode) == 0o600
    assert_signed_by(load(tmp_path / "runner-1.pem"), load(tmp_path / CA_CERT))


# 5. bad input changes nothing


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"runners": [".hidden"]}, ".hidden"),
        ({"runners": ["-x"]}, "-x"),
        ({"runners": ["a/b"]}, "a/b"),
        ({"runners": [""]}, "''"),
        ({"runners": ["r" * 65]}, "r" * 65),
        ({"runners": ["ca"]}, "ca"),
        ({"coordinators": ["CA"]}, "CA"),
        ({"runners": ["runner-1", "runner-1"]}, "runner-1"),
        ({"coordinators": ["same"], "runners": ["same"]}, "same"),
        ({"hosts": ["bad host"]}, "bad host"),
        ({"hosts": ["-bad.example"]}, "-bad.example"),
        ({"hosts": ["a..b"]}, "a..b"),
        ({"hosts": ["x" * 254]}, "x" * 254),
        ({"days": 0}, "0"),
        ({"days": 3651}, "3651"),
    ],
)
def test_bad_input_raises_naming_the_value_and_writes_nothing(
    tmp_path: Path, kwargs: dict[str, Any], named: str
) -> None:
    """Bad names, duplicates, bad hosts, days out of range: CertsError, no directory made."""
    directory = tmp_path / "tls"
    with pytest.raises(CertsError) as raised:
        issue_deployment(directory, now=NOW, **kwargs)
    assert named in str(raised.value)
    assert not directory.exists()


def test_bad_input_leaves_an_existing_directory_unchanged(tmp_path: Path) -> None:
    """A bad runner name after a good one: no new leaf, even the good one is not written."""
    issue_deployment(tmp_path, now=NOW)
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    with pytest.raises(CertsError, match="bad/name"):
        issue_deployment(tmp_path, coordinators=[], runners=["runner-2", "bad/name"], now=NOW)
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before


def test_names_and_hosts_at_the_limits_are_accepted(tmp_path: Path) -> None:
    """64-character names, _ . - inside, an IPv6 host and a 253-character DNS name are fine."""
    long_host = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
    assert len(long_host) == 253
    name = "r" * 64
    issue_deployment(
        tmp_path, coordinators=["_c.1"], runners=[name], hosts=["fd00::5", long_host], days=3650
    )
    sans = load(tmp_path / f"{name}.pem").extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert long_host in sans.value.get_values_for_type(x509.DNSName)
    assert ipaddress.ip_address("fd00::5") in sans.value.get_values_for_type(x509.IPAddress)


# 6. a real mutual-TLS handshake


async def _whoami(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    """What the server side knows about its TLS peer, as JSON."""
    auth = context.auth_context()
    identities = context.peer_identities() or []
    return json.dumps(
        {
            "auth": {key: [v.decode() for v in values] for key, values in auth.items()},
            "peer_identity_key": context.peer_identity_key(),
            "peer_identities": [v.decode() for v in identities],
        }
    ).encode()


async def _mtls_scenario(directory: Path, other: Path) -> dict[str, Any]:
    ca = (directory / CA_CERT).read_bytes()
    server = grpc.aio.server()
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "turnwire.test.Peer", {"WhoAmI": grpc.unary_unary_rpc_method_handler(_whoami)}
            ),
        )
    )
    credentials = grpc.ssl_server_credentials(
        [((directory / "runner-1.key").read_bytes(), (directory / "runner-1.pem").read_bytes())],
        root_certificates=ca,
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    result: dict[str, Any] = {}
    try:
        coordinator = grpc.ssl_channel_credentials(
            root_certificates=ca,
            private_key=(directory / "coordinator.key").read_bytes(),
            certificate_chain=(directory / "coordinator.pem").read_bytes(),
        )
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", coordinator) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            reply = await check(health_pb2.HealthCheckRequest(), timeout=10)
            result["health"] = reply.status
            raw = await channel.unary_unary(WHOAMI)(b"", timeout=10)
            result.update(json.loads(raw))

        anonymous = grpc.ssl_channel_credentials(root_certificates=ca)
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", anonymous) as channel:
            try:
                await channel.unary_unary(WHOAMI)(b"", timeout=10)
            except grpc.aio.AioRpcError as error:
                result["anonymous"] = error.code()

        # The same names from another deployment's CA: the runner must refuse it.
        stranger = grpc.ssl_channel_credentials(
            root_certificates=ca,
            private_key=(other / "coordinator.key").read_bytes(),
            certificate_chain=(other / "coordinator.pem").read_bytes(),
        )
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", stranger) as channel:
            try:
                await channel.unary_unary(WHOAMI)(b"", timeout=10)
            except grpc.aio.AioRpcError as error:
                result["stranger"] = error.code()
    finally:
        await server.stop(None)
    return result


def test_mutual_tls_handshake_identifies_the_coordinator_and_refuses_others(
    tmp_path: Path,
) -> None:
    """Runner cert serves, coordinator cert connects and is seen as CN coordinator with its
    URI SAN; a client without a certificate, or with another CA's, gets UNAVAILABLE."""
    issue_deployment(tmp_path / "tls", hosts=["example.internal"])
    issue_deployment(tmp_path / "other")
    result = asyncio.run(_mtls_scenario(tmp_path / "tls", tmp_path / "other"))

    assert result["health"] == health_pb2.HealthCheckResponse.SERVING
    auth = result["auth"]
    # Observed (grpcio 1.85.3, BoringSSL) on the server for a peer using coordinator.pem;
    # context.auth_context() maps str keys to lists of bytes (decoded here):
    #   transport_security_type        ['ssl']
    #   x509_subject                   ['CN=coordinator']
    #   x509_common_name               ['coordinator']
    #   x509_pem_cert                  ['-----BEGIN CERTIFICATE-----\n...'] (the peer's leaf)
    #   x509_subject_alternative_name  ['localhost', '127.0.0.1', '::1', 'example.internal',
    #                                   'urn:turnwire:coordinator:coordinator']
    #                                  (every SAN, in certificate order, the URI included)
    #   peer_dns                       ['localhost', 'example.internal']
    #   peer_ip                        ['127.0.0.1', '::1']
    #   peer_uri                       ['urn:turnwire:coordinator:coordinator']
    #   security_level                 ['TSI_PRIVACY_AND_INTEGRITY']
    #   ssl_session_reused             ['false']
    #   ssl_tls_version                ['TLSv1.3']
    #   ssl_negotiated_key_exchange_group ['X25519MLKEM768'] (varies with the build)
    # context.peer_identity_key() is 'x509_subject_alternative_name', so
    # context.peer_identities() is that same SAN list. To tell a coordinator from a
    # runner, read the one 'peer_uri' value (urn:turnwire:<role>:<name>), not the CN.
    assert auth["x509_common_name"] == ["coordinator"]
    assert auth["x509_subject"] == ["CN=coordinator"]
    assert auth["peer_uri"] == ["urn:turnwire:coordinator:coordinator"]
    assert auth["x509_subject_alternative_name"] == [
        "localhost",
        "127.0.0.1",
        "::1",
        "example.internal",
        "urn:turnwire:coordinator:coordinator",
    ]
    assert auth["peer_dns"] == ["localhost", "example.internal"]
    assert auth["peer_ip"] == ["127.0.0.1", "::1"]
    assert auth["transport_security_type"] == ["ssl"]
    assert identity_of(auth["x509_pem_cert"][0].encode()) == "coordinator"
    assert result["peer_identity_key"] == "x509_subject_alternative_name"
    assert result["peer_identities"] == auth["x509_subject_alternative_name"]

    assert result["anonymous"] == grpc.StatusCode.UNAVAILABLE
    assert result["stranger"] == grpc.StatusCode.UNAVAILABLE


# 7. the command line


def test_cli_writes_the_named_runners_and_prints_the_next_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """certs --runner r1 --runner r2: exit 0, CA + r1 + r2 written, a line each, the hint."""
    directory = tmp_path / "tls"
    assert cli.main(["certs", "--dir", str(directory), "--runner", "r1", "--runner", "r2"]) == 0
    out = capsys.readouterr().out
    names = sorted(p.name for p in directory.iterdir())
    assert names == ["ca.key", "ca.pem", "r1.key", "r1.pem", "r2.key", "r2.pem"]
    for name in names:
        assert f"wrote {directory / name} " in out
    assert f"wrote {directory / 'r1.pem'} (runner, CN r1, valid until " in out
    assert (
        f"next: python -m runner_svc serve --tls-cert {directory}/r1.pem "
        f"--tls-key {directory}/r1.key --tls-ca {directory}/ca.pem ..."
    ) in out


def test_cli_defaults_to_coordinator_and_runner_1_and_says_when_the_ca_is_reused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No names: coordinator + runner-1 and both hint lines; a later run says the CA is reused."""
    assert cli.main(["certs", "--dir", str(tmp_path), "--host", "10.1.2.3", "--days", "7"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "coordinator.pem").exists() and (tmp_path / "runner-1.pem").exists()
    assert (
        f"      python -m coordinator_svc serve --tls-cert {tmp_path}/coordinator.pem "
        f"--tls-key {tmp_path}/coordinator.key --tls-ca {tmp_path}/ca.pem ..."
    ) in out
    assert cli.main(["certs", "--dir", str(tmp_path), "--runner", "runner-2"]) == 0
    out = capsys.readouterr().out
    assert f"reused the existing CA {tmp_path / 'ca.pem'}" in out
    assert "coordinator_svc" not in out


def test_cli_bad_name_exits_2_with_one_stderr_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad name: exit 2, `turnwire certs: ...` on stderr naming it, nothing written."""
    assert cli.main(["certs", "--dir", str(tmp_path / "tls"), "--runner", "no/slash"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("turnwire certs: ") and "no/slash" in err
    assert not (tmp_path / "tls").exists()


def test_cli_refuses_to_overwrite_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing runner: exit 2 and --force named; with --force: exit 0."""
    assert cli.main(["certs", "--dir", str(tmp_path)]) == 0
    assert cli.main(["certs", "--dir", str(tmp_path), "--runner", "runner-1"]) == 2
    assert "--force" in capsys.readouterr().err
    assert cli.main(["certs", "--dir", str(tmp_path), "--runner", "runner-1", "--force"]) == 0


def test_cli_help_explains_the_files(capsys: pytest.CaptureFixture[str]) -> None:
    """--help exits 0 and names ca.pem, the key mode, CA reuse and examples."""
    assert cli.main(["certs", "--help"]) == 0
    out = capsys.readouterr().out
    assert "ca.pem" in out and "0600" in out and "reused" in out and "examples:" in out
    assert cli.main(["--help"]) == 0
    assert "certs" in capsys.readouterr().out
