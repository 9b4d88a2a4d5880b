"""Serving a grpc.aio server the way both services need it.

- Binds exactly the given address and refuses a port already in use: grpcio
  turns on SO_REUSEPORT by default, and two runners answering on one port
  would split traffic between two dedupe tables.
- Registers grpc health (SERVING / NOT_SERVING per service and overall) and
  server reflection, which also serves the google.rpc files a refusal's
  details are in (REFLECTED_DETAIL_FILES).
- Serves TLS when given server credentials; without them (plaintext) it
  listens on loopback only (turnwire.transport_security, issue 11).
- Reports the bound address (``127.0.0.1:0`` -> the real port) so launchers
  and tests can read it from stdout or a file.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from turnwire.guard import wrapping_server
from turnwire.observability import tracing
from turnwire.transport_security import require_loopback_for_plaintext

NO_PORT_REUSE = (("grpc.so_reuseport", 0),)
# gRPC core cancels, with a bare CANCELLED, the calls that wait for the
# application beyond grpc.server.max_pending_requests (default 1,000; hard
# limit 3,000). A burst must reach our own checks (a runner's gate, the
# coordinator's call limits) and get their typed answer instead (issue 11).
DEFAULT_PENDING_CALLS = 8000
# A refusal's grpc-status-details-bin is a google.rpc.Status holding an
# ErrorInfo (and RetryInfo): no service names these files, so a reflection
# client resolves them by symbol (FileContainingSymbol google.rpc.ErrorInfo),
# which reflection answers from the default descriptor pool. Importing them
# here puts them there on both services, whatever else the process imports.
REFLECTED_DETAIL_FILES = (status_pb2.DESCRIPTOR.name, error_details_pb2.DESCRIPTOR.name)


class AddressInUseError(RuntimeError):
    """The listen address is taken; we never share a port."""


@dataclass
class RunningServer:
    server: grpc.aio.Server
    address: str
    health: health.aio.HealthServicer
    service_names: tuple[str, ...]

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", *self.service_names):
            await self.health.set(name, status)

    async def stop(self, grace: float | None) -> None:
        await self.server.stop(grace)


def split_host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"listen address must be HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def ensure_port_free(address: str) -> None:
    """Raise AddressInUseError if something already listens on ``address``."""
    host, port = split_host_port(address)
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR lets a restarted process take back its own port while
        # old connections sit in TIME_WAIT; Linux still refuses the bind if
        # any socket is LISTENing there, which is exactly the case we reject.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise AddressInUseError(f"cannot listen on {address}: {exc.strerror}") from exc


async def start_server(
    listen: str,
    register: Callable[[grpc.aio.Server], None],
    service_names: Iterable[str],
    *,
    interceptors: Iterable[grpc.aio.ServerInterceptor] = (),
    options: Iterable[tuple[str, object]] = (),
    credentials: grpc.ServerCredentials | None = None,
    wrap_handlers: Callable[[str, Any], Any] | None = None,
    pending_calls: int = DEFAULT_PENDING_CALLS,
) -> RunningServer:
    """Start a grpc.aio server on ``listen`` with health and reflection: TLS with
    ``credentials``, else plaintext, which only a loopback address may serve.
    ``wrap_handlers(method, handler)`` replaces every method handler on the port,
    the service's, health's and reflection's alike (a runner's gate, R11): cheaper
    per call than a server interceptor, which grpc.aio runs in Python for every call.
    ``pending_calls``: arriving calls gRPC may hold for the handlers (twice that
    is its hard limit; see DEFAULT_PENDING_CALLS)."""
    if credentials is None:
        require_loopback_for_plaintext(listen, "plaintext listen address")
    ensure_port_free(listen)
    server = grpc.aio.server(
        # A span per call when tracing is on (issue 13; none while off: no cost).
        interceptors=(*tracing.server_interceptors(), *interceptors),
        options=(
            *NO_PORT_REUSE,
            ("grpc.server.max_pending_requests", pending_calls),
            ("grpc.server.max_pending_requests_hard_limit", 2 * pending_calls),
            *tuple(options),
        ),
    )
    target = server if wrap_handlers is None else wrapping_server(server, wrap_handlers)
    register(target)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, target)
    names = tuple(service_names)
    reflected = (
        *names,
        health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
        reflection.SERVICE_NAME,
    )
    # enable_server_reflection() picks its asyncio servicer only for a real
    # grpc.aio.Server, so the wrapped one is given the asyncio servicer directly.
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        reflection.aio.ReflectionServicer(reflected), target
    )
    try:
        port = (
            server.add_insecure_port(listen)
            if credentials is None
            else server.add_secure_port(listen, credentials)
        )
    except RuntimeError as exc:
        raise AddressInUseError(f"cannot listen on {listen}: {exc}") from exc
    if port == 0:
        raise AddressInUseError(f"cannot listen on {listen}")
    host, _ = split_host_port(listen)
    shown_host = f"[{host}]" if ":" in host else host
    running = RunningServer(server, f"{shown_host}:{port}", health_servicer, names)
    await server.start()
    await running.set_serving(True)
    return running


def announce(address: str, address_file: str | None) -> None:
    """Print the bound address on a line of its own (and write it to a file)."""
    # The file first: whoever reads the printed line may look for the file next.
    if address_file:
        path = Path(address_file)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(address + "\n")
        tmp.replace(path)  # atomic: a reader never sees half an address
    print(f"listening on {address}", flush=True)
