"""A local CA and mutual-TLS certificates for one Turnwire deployment (``turnwire certs``).

The coordinator and its runners talk over gRPC, and in a real deployment each
side must prove who it is: the coordinator serves the public API and is a TLS
*client* of every runner, so both ends present certificates signed by one CA
that belongs to this deployment alone. ``issue_deployment`` makes that CA
(``ca.pem``/``ca.key``) and one certificate and key per service
(``<name>.pem``/``<name>.key``) in a single directory.

Each leaf carries its name as the subject CN and a URI SAN
``urn:turnwire:<role>:<name>``, so a peer can be told apart by role without
trusting the free-form CN. Every leaf also names ``localhost``, ``127.0.0.1``
and ``::1`` so a deployment on one machine works without extra flags.

An existing CA is reused, never replaced: replacing it would silently cut off
every certificate issued before, so adding ``runner-3`` later only needs the
new name. Leaves are replaced only with ``overwrite=True`` (``--force``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT = "ca.pem"
CA_KEY = "ca.key"
CA_COMMON_NAME = "Turnwire deployment CA"
URI_PREFIX = "urn:turnwire"
DEFAULT_DAYS = 825  # the longest validity browsers and most TLS stacks still accept
MAX_DAYS = 3650
KEY_MODE = 0o600
CERT_MODE = 0o644
DIR_MODE = 0o700
# Certificates made on one host are checked on another whose clock may be behind.
CLOCK_SKEW = dt.timedelta(minutes=5)

Role = Literal["ca", "coordinator", "runner"]
IssuerKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
_DNS_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


class CertsError(ValueError):
    """Bad input or a directory in a state we will not touch; the message names the value."""


@dataclass(frozen=True)
class IssuedFile:
    path: Path
    role: Role
    common_name: str
    private: bool  # a private key (mode 0o600) rather than a certificate
    not_after: dt.datetime


@dataclass(frozen=True)
class IssuedCerts:
    directory: Path
    ca_reused: bool
    written: tuple[IssuedFile, ...]  # in the order written
    reused: tuple[Path, ...]  # ca.pem and ca.key when an existing CA signed the leaves

    def cert_of(self, name: str) -> Path:
        return self.directory / f"{name}.pem"

    def key_of(self, name: str) -> Path:
        return self.directory / f"{name}.key"


def identity_of(cert_pem: bytes) -> str:
    """The subject CN of a PEM certificate: the service name ``issue_deployment`` gave it."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as error:
        raise CertsError(f"not a PEM certificate: {error}") from None
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        raise CertsError("the certificate has no subject common name")
    value = names[0].value
    return value.decode() if isinstance(value, bytes) else value


def issue_deployment(
    directory: Path,
    *,
    coordinators: Sequence[str] = ("coordinator",),
    runners: Sequence[str] = ("runner-1",),
    hosts: Sequence[str] = (),
    days: int = DEFAULT_DAYS,
    overwrite: bool = False,
    now: dt.datetime | None = None,
) -> IssuedCerts:
    """Write (or reuse) the CA and one certificate + key per name in ``directory``.

    Everything is checked before the first write, so a ``CertsError`` leaves the
    directory as it was. ``now`` is for tests; a naive value is taken as UTC.
    """
    directory = Path(directory)
    leaves: list[tuple[Role, str]] = [("coordinator", n) for n in coordinators]
    leaves += [("runner", n) for n in runners]
    _check_names([name for _, name in leaves])
    sans = _check_hosts(hosts)
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise CertsError(f"days must be 1..{MAX_DAYS}, got {days!r}")
    if directory.exists() and not directory.is_dir():
        raise CertsError(f"{directory} exists and is not a directory")
    ca_cert_path, ca_key_path = directory / CA_CERT, directory / CA_KEY
    if ca_cert_path.exists() != ca_key_path.exists():
        missing = ca_key_path if ca_cert_path.exists() else ca_cert_path
        raise CertsError(f"{missing} is missing (the CA needs both {CA_CERT} and {CA_KEY})")
    if not overwrite:
        for _, name in leaves:
            for path in (directory / f"{name}.pem", directory / f"{name}.key"):
                if path.exists():
                    raise CertsError(f"{path} already exists; use --force to replace it")

    now = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
    now = now.replace(tzinfo=dt.UTC) if now.tzinfo is None else now.astimezone(dt.UTC)
    not_after = now + dt.timedelta(days=days)
    written: list[IssuedFile] = []
    ca_reused = ca_cert_path.exists()
    if ca_reused:
        ca_cert, ca_key = _load_ca(ca_cert_path, ca_key_path, now)
        # A leaf outliving its CA would stop verifying anyway, earlier than it says.
        not_after = min(not_after, ca_cert.not_valid_after_utc)
    else:
        if not directory.exists():
            directory.mkdir(parents=True, mode=DIR_MODE)
            os.chmod(directory, DIR_MODE)  # mkdir's mode is narrowed by the umask
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _make_ca(ca_key, now, not_after)
        written += _write_pair(directory, "ca", "ca", ca_cert, ca_key)
    for role, name in leaves:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _make_leaf(role, name, key, ca_cert, ca_key, sans, now, not_after)
        written += _write_pair(directory, name, role, cert, key)
    _fsync_directory(directory)
    reused = (ca_cert_path, ca_key_path) if ca_reused else ()
    return IssuedCerts(directory, ca_reused, tuple(written), reused)


def _check_names(names: Sequence[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise CertsError(
                f"bad name {name!r}: use 1..64 of A-Z a-z 0-9 . _ -, not starting with . or -"
            )
        # Case-folded: on a case-insensitive filesystem CA.pem is ca.pem.
        if name.lower() == "ca":
            raise CertsError(f"bad name {name!r}: reserved for the CA's own files")
        if name.lower() in seen:
            raise CertsError(f"duplicate name {name!r}: every service needs its own name")
        seen.add(name.lower())


def _check_hosts(hosts: Sequence[str]) -> list[x509.GeneralName]:
    sans: list[x509.GeneralName] = []
    seen: set[str] = set()
    for host in (*_LOCAL_HOSTS, *hosts):
        if not isinstance(host, str):
            raise CertsError(f"bad host {host!r}: give an IP address or a DNS name")
        general: x509.GeneralName
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            labels = host.split(".")
            if not 1 <= len(host) <= 253 or not all(_DNS_LABEL.fullmatch(x) for x in labels):
                raise CertsError(f"bad host {host!r}: give an IP address or a DNS name") from None
            key, general = host.lower(), x509.DNSName(host.lower())
        else:
            key, general = str(address), x509.IPAddress(address)
        if key not in seen:
            seen.add(key)
            sans.append(general)
    return sans


def _load_ca(
    cert_path: Path, key_path: Path, now: dt.datetime
) -> tuple[x509.Certificate, IssuerKey]:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except ValueError as error:
        raise CertsError(f"{cert_path} is not a PEM certificate: {error}") from None
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError) as error:
        raise CertsError(f"{key_path} is not an unencrypted PEM private key: {error}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertsError(f"{key_path} must hold an EC or RSA key")
    if key.public_key() != cert.public_key():
        raise CertsError(f"{key_path} is not the key of {cert_path}")
    if cert.not_valid_after_utc <= now:
        raise CertsError(f"{cert_path} expired on {cert.not_valid_after_utc:%Y-%m-%d}")
    return cert, key


def _make_ca(
    key: ec.EllipticCurvePrivateKey, now: dt.datetime, not_after: dt.datetime
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_COMMON_NAME)])
    # path_length=0: this CA signs services, never another CA.
    return (
        _builder(name, name, key.public_key(), now, not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .sign(key, hashes.SHA256())
    )


def _make_leaf(
    role: Role,
    name: str,
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: IssuerKey,
    sans: list[x509.GeneralName],
    now: dt.datetime,
    not_after: dt.datetime,
) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    uri = x509.UniformResourceIdentifier(f"{URI_PREFIX}:{role}:{name}")
    try:
        ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)
    except x509.ExtensionNotFound:
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    # Both roles are TLS servers and clients: the coordinator dials its runners,
    # and a runner that can act as a client lets operators probe with its cert.
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    return (
        _builder(subject, ca_cert.subject, key.public_key(), now, not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(aki, critical=False)
        .add_extension(x509.SubjectAlternativeName([*sans, uri]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    now: dt.datetime,
    not_after: dt.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=not cert_sign,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _write_pair(
    directory: Path, stem: str, role: Role, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> list[IssuedFile]:
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    common_name = identity_of(cert_pem := cert.public_bytes(serialization.Encoding.PEM))
    # The key first: a crash in between leaves a key without a certificate, never
    # a certificate whose key is gone.
    _write_atomic(key_path := directory / f"{stem}.key", key_pem, KEY_MODE)
    _write_atomic(cert_path := directory / f"{stem}.pem", cert_pem, CERT_MODE)
    until = cert.not_valid_after_utc
    return [
        IssuedFile(key_path, role, common_name, True, until),
        IssuedFile(cert_path, role, common_name, False, until),
    ]


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    # Created 0o600 so a private key is never readable by others, not even briefly.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), mode)  # exact mode whatever the umask
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _fsync_directory(directory: Path) -> None:
    # The renames are durable only once the directory itself is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
