"""``turnwire-coordinator health`` / ``turnwire-runner health``: a container's health check.

One grpc.health.v1 Check of the service ``serve`` runs with the same flags,
on this host: the listen address (``0.0.0.0`` and ``::`` become the loopback
address; port 0 is read from ``--address-file``), over the same transport
security. It prints the status and exits 0 for SERVING, 1 for anything else
(NOT_SERVING while draining, no answer, a refusal), so Docker's HEALTHCHECK
and compose's ``healthcheck`` can run it as it is.

- The coordinator's health needs no client certificate: the probe trusts
  ``--tls-ca`` (or speaks plaintext on loopback).
- A runner's gate stands in front of its health too (R11): the probe presents
  the runner's own certificate, so a runner checked this way lists its own CN
  among its ``--coordinator-identity`` values (nobody but that runner holds its
  key); in plaintext it sends the runner's secret.

When the address dialled is not among the certificate's names, the probe asks
for the certificate's first DNS name (``grpc.ssl_target_name_override``): the
service's own certificate names the service, whatever address reaches it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from turnwire.secure_channels import channel_credentials, runner_sync_channel
from turnwire.serving import split_host_port
from turnwire.transport_security import RunnerAccess, RunnerCredentials, TlsMaterial

EXIT_SERVING = 0
EXIT_NOT_SERVING = 1
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def probe_address(listen: str, address_file: str | None) -> str:
    """Where this host reaches the service ``--listen``/``--address-file`` name."""
    host, port = split_host_port(listen)
    if port == 0:
        if not address_file:
            raise ValueError(f"--listen {listen} picks its port at start: give --address-file")
        host, port = split_host_port(Path(address_file).read_text().strip())
    host = _WILDCARDS.get(host, host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _address(listen: str, address_file: str | None) -> str | None:
    try:
        return probe_address(listen, address_file)
    except (OSError, ValueError) as exc:
        print(f"health: {exc}", file=sys.stderr, flush=True)
        return None


def _name_override(tls: TlsMaterial, address: str) -> list[tuple[str, str]]:
    from cryptography import x509

    from turnwire.cert_check import common_name

    cert = x509.load_pem_x509_certificates(tls.cert_chain)[0]
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        dns: list[str] = []
        ips: list[str] = []
    else:
        dns = list(sans.get_values_for_type(x509.DNSName))
        ips = [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    host = split_host_port(address)[0]
    if host in dns or host in ips:
        return []
    name = dns[0] if dns else common_name(cert)
    return [("grpc.ssl_target_name_override", name)] if name else []


def _check(channel: grpc.Channel, address: str, timeout: float) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
    except grpc.RpcError as error:
        code = error.code().name if hasattr(error, "code") else "ERROR"
        details = error.details() if hasattr(error, "details") else str(error)
        print(f"{address}: {code}: {details}", file=sys.stderr, flush=True)
        return EXIT_NOT_SERVING
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{address}: {status}", flush=True)
    return EXIT_SERVING if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


def coordinator_health(
    listen: str, address_file: str | None, tls: TlsMaterial | None, *, timeout: float
) -> int:
    """The coordinator's health at ``listen`` (TLS trusting ``tls.ca``, or plaintext)."""
    address = _address(listen, address_file)
    if address is None:
        return EXIT_NOT_SERVING
    if tls is None:
        channel = grpc.insecure_channel(address)
    else:
        credentials = channel_credentials(tls, present_certificate=False)
        channel = grpc.secure_channel(address, credentials, options=_name_override(tls, address))
    with channel:
        return _check(channel, address, timeout)


def runner_health(
    listen: str, address_file: str | None, access: RunnerAccess, *, timeout: float
) -> int:
    """The runner's health at ``listen``, presenting its own certificate (or its secret)."""
    address = _address(listen, address_file)
    if address is None:
        return EXIT_NOT_SERVING
    credentials = RunnerCredentials.for_access(access)
    options = _name_override(access.tls, address) if access.tls is not None else []
    with runner_sync_channel(credentials, address, options=options) as channel:
        status = _check(channel, address, timeout)
    if status != EXIT_SERVING and access.tls is not None:
        print(
            "health: a runner answers this probe only if its own certificate's CN is among "
            "its --coordinator-identity values",
            file=sys.stderr,
            flush=True,
        )
    return status
