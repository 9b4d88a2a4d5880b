"""What ``--check-config`` checks of a service's TLS material, before any handshake would.

The three files parse as PEM; the private key is the certificate's; the
certificate (and any intermediates after it in its file) chains to a CA in
``--tls-ca``; every one is valid now (a warning within 30 days of its end);
it may be used the way the service uses it (extended key usage: both services
serve TLS, the coordinator is also a client of its runners); and it is not
the other role's certificate (``turnwire certs`` names the role in a URI SAN,
``urn:turnwire:<role>:<name>``).
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from turnwire.certs import URI_PREFIX
from turnwire.config_check import ConfigProblem, Warned

EXPIRY_WARNING = dt.timedelta(days=30)
_SERVER, _CLIENT = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
_USAGES = {"coordinator": (_SERVER, _CLIENT), "runner": (_SERVER,)}
_USAGE_NAMES = {_SERVER: "TLS server use (serverAuth)", _CLIENT: "TLS client use (clientAuth)"}


@dataclass(frozen=True)
class CertificateSummary:
    common_name: str
    names: tuple[str, ...]  # the DNS and IP SANs: what a peer may dial it by
    not_after: dt.datetime
    warnings: tuple[str, ...] = ()  # valid now, but not for long


def _reissue(role: str, path: Path) -> str:
    return (
        f"issue it again from the deployment CA: turnwire certs --dir {path.parent} "
        f"--{role} {path.stem} --force (or your own CA's equivalent)"
    )


def _load_certificates(path: Path, what: str) -> list[x509.Certificate]:
    try:
        found = x509.load_pem_x509_certificates(path.read_bytes())
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigProblem(
            f"{what} {path} is not a PEM certificate: {exc}",
            f"give the PEM file (-----BEGIN CERTIFICATE-----) as {what}",
        ) from None
    return found


def common_name(cert: x509.Certificate) -> str:
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        return ""
    value = names[0].value
    return value.decode() if isinstance(value, bytes) else value


def _sans(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    """(DNS and IP names, URIs) of the certificate's subject alternative names."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    hosts = [*ext.get_values_for_type(x509.DNSName)]
    hosts += [str(ip) for ip in ext.get_values_for_type(x509.IPAddress)]
    return hosts, list(ext.get_values_for_type(x509.UniformResourceIdentifier))


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _check_dates(cert: x509.Certificate, label: str, now: dt.datetime, fix: str) -> str | None:
    """Raise for a certificate not valid now; a warning text when it ends soon."""
    if cert.not_valid_before_utc > now:
        raise ConfigProblem(
            f"{label} is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC "
            "(is this machine's clock right?)",
            fix,
        )
    if cert.not_valid_after_utc <= now:
        raise ConfigProblem(f"{label} expired on {cert.not_valid_after_utc:%Y-%m-%d}", fix)
    if cert.not_valid_after_utc - now < EXPIRY_WARNING:
        return f"{label} expires on {cert.not_valid_after_utc:%Y-%m-%d}"
    return None


def check_tls_files(
    cert_path: Path, key_path: Path, ca_path: Path, *, role: str, now: dt.datetime | None = None
) -> CertificateSummary:
    """Check the service's certificate, key and CA files (ConfigProblem says what to fix)."""
    now = now or dt.datetime.now(dt.UTC)
    reissue = _reissue(role, cert_path)
    chain = _load_certificates(cert_path, "TLS certificate")
    cas = _load_certificates(ca_path, "TLS CA")
    leaf = chain[0]
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except OSError as exc:
        raise ValueError(f"cannot read TLS key {key_path}: {exc.strerror}") from None
    except (ValueError, TypeError) as exc:
        raise ConfigProblem(
            f"TLS key {key_path} is not an unencrypted PEM private key: {exc}",
            "give the certificate's private key, PEM, without a passphrase",
        ) from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.PEM
    if key.public_key().public_bytes(encoding, public) != leaf.public_key().public_bytes(
        encoding, public
    ):
        raise ConfigProblem(
            f"TLS key {key_path} is not the key of {cert_path}",
            "give the key file made with this certificate (turnwire certs writes NAME.pem "
            "beside NAME.key)",
        )
    for lower, upper in itertools.pairwise(chain):
        if not _issued_by(lower, upper):
            raise ConfigProblem(
                f"{cert_path}: certificate {common_name(lower)!r} is not signed by the next "
                f"one in the file, {common_name(upper)!r}",
                "put the service's certificate first, then each intermediate in order",
            )
    top = chain[-1]
    anchor = next((ca for ca in cas if ca == top or _issued_by(top, ca)), None)
    if anchor is None:
        raise ConfigProblem(
            f"{cert_path} does not chain to a CA in {ca_path} (it was issued by "
            f"{top.issuer.rfc4514_string()!r})",
            f"give the CA that issued it as --tls-ca, or {reissue}",
        )
    warnings = [
        warning
        for cert, label, fix in (
            *((c, f"{cert_path} ({common_name(c)!r})", reissue) for c in chain),
            (anchor, f"CA {ca_path}", "make a new CA and rotate (docs/DEPLOYMENT.md)"),
        )
        if (warning := _check_dates(cert, label, now, fix))
    ]
    hosts, uris = _sans(leaf)
    roles = {uri.split(":")[2] for uri in uris if uri.startswith(URI_PREFIX + ":")}
    if roles and role not in roles:
        raise ConfigProblem(
            f"{cert_path} is a {'/'.join(sorted(roles))} certificate "
            f"({', '.join(uris)}), not a {role}'s",
            f"give this {role} its own certificate (turnwire certs --{role} NAME)",
        )
    _check_usage(leaf, cert_path, role, reissue)
    return CertificateSummary(
        common_name(leaf), tuple(hosts), leaf.not_valid_after_utc, tuple(warnings)
    )


def _check_usage(leaf: x509.Certificate, path: Path, role: str, fix: str) -> None:
    try:
        usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return  # no restriction: any use
    missing = [_USAGE_NAMES[oid] for oid in _USAGES[role] if oid not in usages]
    if missing:
        raise ConfigProblem(
            f"{path} may not be used for {', '.join(missing)}, which a {role} needs",
            fix,
        )


def describe(summary: CertificateSummary, ca_path: Path, note: str = "") -> str | Warned:
    """The check's line: what the certificate is (a Warned when it ends soon)."""
    names = ", ".join(summary.names) or "no DNS or IP names"
    text = (
        f"CN {summary.common_name!r}, names {names}, chains to {ca_path}, "
        f"valid until {summary.not_after:%Y-%m-%d}{note}"
    )
    if summary.warnings:
        return Warned("; ".join(summary.warnings) + f" ({text})")
    return text
