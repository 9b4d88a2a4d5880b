"""``/metrics`` over HTTP for both services (issue 13), one registry per process.

Each process builds its own ``CollectorRegistry`` (``new_registry``), never
prometheus-client's global one: tests run a coordinator and runners in one
process, and their families must not collide.

It is served like the process's other listeners (``turnwire.transport_security``):
over HTTPS with the process's own certificate when it has one (``--tls-cert`` /
``--tls-key``), and in plain HTTP only when it runs without TLS, on a loopback
address only (refused before anything starts otherwise). The metrics hold no
secret and no operation id, but they name principals and runners, which are not
for whoever can reach a port. No client certificate is asked for: Prometheus
scrapes with ``scheme: https`` and the deployment CA as ``tls_config.ca_file``.

The server runs on its own daemon thread (prometheus-client's WSGI server),
so a scrape never waits for the event loop to be free; collectors that read
the loop's in-memory state do it on the loop (``read_on_loop``), bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import socket
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

from turnwire.serving import AddressInUseError, split_host_port
from turnwire.transport_security import SecurityConfigError, TlsMaterial, is_loopback_host

log = logging.getLogger("turnwire.observability.metrics")

METRICS_PATH = "/metrics"
# How long a scrape waits for the event loop to hand over its in-memory state.
LOOP_READ_TIMEOUT_SECONDS = 5.0
_HOST_PORT = re.compile(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.\-]+):\d{1,5}")

T = TypeVar("T")


def parse_metrics_listen(text: str) -> str:
    """``--metrics-listen`` HOST:PORT (ValueError says what is wrong)."""
    if not _HOST_PORT.fullmatch(text):
        raise ValueError(f"--metrics-listen must be HOST:PORT, got {text!r}")
    if int(text.rpartition(":")[2]) > 65535:
        raise ValueError(f"--metrics-listen: port out of range in {text!r}")
    return text


def _metrics_listen_type(text: str) -> str:
    try:
        return parse_metrics_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_metrics_arguments(
    serve: argparse.ArgumentParser,
    *,
    env_prefix: str,
    listen_default: str | None,
    address_file_default: str | None,
) -> None:
    """``--metrics-listen`` and ``--metrics-address-file``, spelled the same on both
    services (docs/METRICS.md); each service reads its own environment
    (``env_prefix`` + ``METRICS_LISTEN``, named in the help) for the defaults."""
    serve.add_argument(
        "--metrics-listen",
        type=_metrics_listen_type,
        default=listen_default,
        metavar="HOST:PORT",
        help="serve Prometheus metrics at /metrics on HOST:PORT (docs/METRICS.md): HTTPS with "
        "the --tls-* certificate, or plain HTTP on a loopback address only with --plaintext; "
        f"port 0 picks a free one and prints it (env {env_prefix}METRICS_LISTEN; default: off)",
    )
    serve.add_argument(
        "--metrics-address-file",
        default=address_file_default,
        metavar="FILE",
        help="also write the metrics endpoint's bound HOST:PORT here "
        f"(env {env_prefix}METRICS_ADDRESS_FILE)",
    )


def check_metrics_listen(listen: str, tls: TlsMaterial | None) -> None:
    """Before anything starts: without TLS material, a loopback address only."""
    parse_metrics_listen(listen)
    host, _ = split_host_port(listen)
    if tls is None and not is_loopback_host(host):
        raise SecurityConfigError(
            f"--metrics-listen {listen!r} is not a loopback address: without TLS metrics are "
            "served in plain HTTP only on 127.0.0.1, ::1 or localhost; give --tls-cert, "
            "--tls-key and --tls-ca to serve them over HTTPS on any address"
        )


def new_registry() -> CollectorRegistry:
    """A registry of this process's own, with the process_* and python_info families."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def read_on_loop(
    loop: asyncio.AbstractEventLoop,
    read: Callable[[], T],
    timeout: float = LOOP_READ_TIMEOUT_SECONDS,
) -> T | None:
    """Run ``read`` on ``loop``'s thread and return what it returned: the loop's
    state is read where it is written, never half-way through a change. None
    if the loop has stopped or did not get to it within ``timeout``."""
    if loop.is_closed() or not loop.is_running():
        return None
    done = threading.Event()
    box: list[T] = []
    failure: list[BaseException] = []

    def on_loop() -> None:
        try:
            box.append(read())
        except BaseException as exc:  # reported on the scraping thread below
            failure.append(exc)
        finally:
            done.set()

    try:
        loop.call_soon_threadsafe(on_loop)
    except RuntimeError:  # closed between the check and the call
        return None
    if not done.wait(timeout):
        log.warning("metrics: the event loop did not answer within %.1fs", timeout)
        return None
    if failure:
        raise failure[0]
    return box[0]


class _Quiet(WSGIRequestHandler):
    # A client that stalls (or never finishes a TLS handshake) holds only its own
    # thread, and only this long.
    timeout = 10

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged (one every few seconds)."""


def _only_metrics(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """Serve ``/metrics``; any other path is a 404 that says where to look."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "") != METRICS_PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"not found: metrics are at {METRICS_PATH}\n".encode()]
        return app(environ, start_response)

    return serve


def _tls_context(tls: TlsMaterial) -> ssl.SSLContext:
    """A server context from PEM bytes. ssl loads a chain only from files: they are
    written to a private temporary directory and removed as soon as they are read."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="turnwire-metrics-tls-") as directory:
        cert, key = Path(directory) / "cert.pem", Path(directory) / "key.pem"
        cert.write_bytes(tls.cert_chain)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(tls.private_key)
        context.load_cert_chain(certfile=str(cert), keyfile=str(key))
    return context


@dataclass
class MetricsEndpoint:
    """A serving ``/metrics``. ``stop()`` is idempotent."""

    address: str
    scheme: str
    _server: WSGIServer
    _thread: threading.Thread
    _stopped: bool = False

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}{METRICS_PATH}"

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._server.shutdown()  # ends serve_forever (bounded by its 0.5 s poll)
        self._server.server_close()
        self._thread.join(timeout=5.0)


def start_metrics_endpoint(
    listen: str,
    registry: CollectorRegistry,
    *,
    tls: TlsMaterial | None = None,
    address_file: str | Path | None = None,
) -> MetricsEndpoint:
    """Serve ``registry`` at ``/metrics`` on ``listen`` (port 0 picks one; the bound
    address is in the result, logged, and written to ``address_file`` if given).
    HTTPS with ``tls``; without it plain HTTP, on loopback only (``check_metrics_listen``).
    Raises AddressInUseError if it cannot bind, SecurityConfigError per the rule."""
    check_metrics_listen(listen, tls)
    host, port = split_host_port(listen)
    use_tls = tls is not None
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except OSError as exc:
        raise AddressInUseError(f"cannot listen on {listen} for metrics: {exc}") from exc

    class _Server(ThreadingWSGIServer):
        address_family = family
        # SO_REUSEADDR, as gRPC sets on its ports and ensure_port_free probes with: a
        # process restarted within a minute of a scrape takes its port back from the
        # scrape's TIME_WAIT; Linux still refuses the bind while any socket LISTENs
        # there, so a taken port stays an error (never a shared one: no SO_REUSEPORT).
        allow_reuse_address = True

    try:
        server = make_server(
            host, port, _only_metrics(make_wsgi_app(registry)), _Server, handler_class=_Quiet
        )
    except OSError as exc:
        raise AddressInUseError(f"cannot listen on {listen} for metrics: {exc.strerror}") from exc
    if use_tls:
        assert tls is not None
        try:
            # The handshake happens on the request's own thread (first read), not in
            # accept(): a client that never finishes one cannot stop the others.
            server.socket = _tls_context(tls).wrap_socket(
                server.socket, server_side=True, do_handshake_on_connect=False
            )
        except (OSError, ssl.SSLError) as exc:
            server.server_close()
            raise SecurityConfigError(f"cannot serve metrics over TLS: {exc}") from exc
    bound_port = server.server_address[1]
    shown_host = f"[{host}]" if ":" in host else host
    thread = threading.Thread(
        target=server.serve_forever, name="metrics-http", kwargs={"poll_interval": 0.5}
    )
    thread.daemon = True
    thread.start()
    endpoint = MetricsEndpoint(
        f"{shown_host}:{bound_port}", "https" if use_tls else "http", server, thread
    )
    if address_file is not None:
        path = Path(address_file)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(endpoint.address + "\n")
        tmp.replace(path)  # atomic: a reader never sees half an address
    log.info("metrics on %s", endpoint.url)
    return endpoint
