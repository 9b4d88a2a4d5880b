"""The console's HTTP server: a static page and the JSON API, in a thread of its own.

Started by the coordinator when ``--console-listen HOST:PORT`` is given (off
by default). It serves plaintext HTTP only on a loopback address; anywhere
else it needs the coordinator's TLS material (``--tls-cert/--tls-key/--tls-ca``)
and serves HTTPS with it, the rule the gRPC API follows
(``turnwire.transport_security``). Port 0 picks a free port; the bound URL is
logged and on ``ConsoleServer.url``.

Every answer carries headers that keep the page to itself: a Content Security
Policy allowing only its own scripts, styles and API (no inline script, no
framing), ``nosniff``, no referrer, and ``no-store`` on the API's answers. No
CORS header is ever sent, so another site's script can neither read an answer
nor send the Authorization header (its preflight is refused). The request
log never holds the token: it is sent only as a header, and headers are not
logged.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from coordinator_svc.console.api import ApiRequest, ConsoleApi
from coordinator_svc.console.upstream import HttpError
from turnwire.serving import AddressInUseError, split_host_port
from turnwire.transport_security import TlsMaterial, require_loopback_for_plaintext

log = logging.getLogger("coordinator_svc.console")

# The largest JSON body accepted (a verdict is a few hundred bytes).
MAX_BODY_BYTES = 64 * 1024
# Seconds a connection may sit idle mid-request before it is closed.
SOCKET_TIMEOUT_SECONDS = 30.0
# Connections served at once, each a thread: a browser opens a handful, so this
# is room for a few operators; past it a connection is closed at once (logged),
# so clients that open many, or never send, cannot grow the threads without bound.
MAX_CONNECTIONS = 64
# At most one WARNING per this many seconds about connections closed at the cap.
CAP_LOG_EVERY_SECONDS = 60.0
_STATIC_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
_SECURITY_HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)


def check_console_address(listen: str, tls: TlsMaterial | None) -> None:
    """Plaintext only on loopback (SecurityConfigError names the fix); HOST:PORT."""
    split_host_port(listen)
    if tls is None:
        require_loopback_for_plaintext(listen, "plaintext console address")


def _static_files() -> dict[str, bytes]:
    """The page's files, read once from the package data."""
    folder = resources.files("coordinator_svc.console") / "static"
    return {name: (folder / name).read_bytes() for name in _STATIC_TYPES}


def _tls_context(tls: TlsMaterial) -> ssl.SSLContext:
    """An HTTPS context from PEM bytes (ssl loads a key only from a file: it is
    written to an owner-only temporary directory and removed at once)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="turnwire-console-") as directory:
        cert, key = Path(directory) / "cert.pem", Path(directory) / "key.pem"
        cert.write_bytes(tls.cert_chain)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(tls.private_key)
        context.load_cert_chain(cert, key)
    return context


class _Handler(BaseHTTPRequestHandler):
    server_version = "turnwire-console"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_SECONDS
    # Set on the subclass made per server.
    api: ConsoleApi
    static: dict[str, bytes]

    def version_string(self) -> str:
        return self.server_version  # no Python version on the wire

    def log_message(self, format: str, *args: Any) -> None:
        # Path and status only (the request line); headers, and so the token, never.
        log.debug("console %s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path.startswith("/api/"):
            self._api(url.path, parse_qs(url.query, keep_blank_values=True), None)
            return
        name = "index.html" if url.path in ("/", "/index.html") else url.path.lstrip("/")
        body = self.static.get(name)
        if body is None:
            self._send(404, "text/plain; charset=utf-8", b"not found\n")
            return
        self._send(200, _STATIC_TYPES[name], body, cache="no-cache")

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        if not url.path.startswith("/api/"):
            self._send(405, "text/plain; charset=utf-8", b"method not allowed\n")
            return
        try:
            body = self._json_body()
        except HttpError as error:
            self._json(error.status, error.body())
            return
        self._api(url.path, parse_qs(url.query, keep_blank_values=True), body)

    def _json_body(self) -> Any:
        if self.headers.get_content_type() != "application/json":
            raise HttpError(415, "UNSUPPORTED_MEDIA_TYPE", "send the body as application/json")
        length_text = self.headers.get("Content-Length", "")
        if not length_text.isdigit():
            raise HttpError(411, "LENGTH_REQUIRED", "a Content-Length header is required")
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body must not become the next request
            raise HttpError(413, "TOO_LARGE", f"the body may have at most {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length)
        try:
            return json.loads(raw or b"{}")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise HttpError(
                400, "INVALID_ARGUMENT", f"the body is not JSON: {exc}", "REQUEST_MALFORMED"
            ) from None

    def _api(self, path: str, query: dict[str, list[str]], body: Any) -> None:
        request = ApiRequest(
            method=self.command,
            path=path,
            query=query,
            authorization=self.headers.get("Authorization"),
            body=body,
        )
        try:
            status, answer = self.api.handle(request)
        except Exception:  # a bug: log it, answer 500 without internals
            log.exception("console API %s %s failed", self.command, path)
            status = 500
            answer = HttpError(500, "INTERNAL", "internal error (logged)").body()
        self._json(status, answer)

    def _json(self, status: int, answer: dict[str, Any]) -> None:
        extra = [("WWW-Authenticate", "Bearer")] if status == 401 else []
        body = json.dumps(answer, separators=(",", ":")).encode()
        self._send(status, "application/json", body, cache="no-store", extra=extra)

    def _send(
        self,
        status: int,
        content_type: str,
        body: bytes,
        *,
        cache: str = "no-store",
        extra: list[tuple[str, str]] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        for name, value in (*_SECURITY_HEADERS, *(extra or [])):
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    tls_context: ssl.SSLContext | None = None

    def server_activate(self) -> None:
        super().server_activate()
        self.open_connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.refused_at_cap = 0
        self._cap_logged_at = float("-inf")

    def process_request(self, request: Any, client_address: Any) -> None:
        # On the accept thread: a connection past the cap gets no thread at all.
        if not self.open_connections.acquire(blocking=False):
            self.refused_at_cap += 1
            now = time.monotonic()
            if now - self._cap_logged_at >= CAP_LOG_EVERY_SECONDS:
                self._cap_logged_at = now
                log.warning(
                    "console: %d connections open (the cap); closed one from %s "
                    "(%d closed at the cap so far): idle browser tabs or a client "
                    "opening many",
                    MAX_CONNECTIONS,
                    client_address[0],
                    self.refused_at_cap,
                )
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.open_connections.release()  # no thread took it
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.open_connections.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake runs here, in the connection's own thread, so a slow
        # or silent client never holds up the accept loop.
        if self.tls_context is not None:
            request.settimeout(SOCKET_TIMEOUT_SECONDS)
            try:
                request = self.tls_context.wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError) as exc:
                log.debug("console TLS handshake with %s failed: %s", client_address, exc)
                return
            try:
                super().finish_request(request, client_address)
            finally:
                request.close()  # the plain socket was detached into this one
            return
        super().finish_request(request, client_address)


class ConsoleServer:
    """The console's HTTP(S) server in a daemon thread. ``stop()`` is idempotent."""

    def __init__(self, listen: str, api: ConsoleApi, tls: TlsMaterial | None = None) -> None:
        check_console_address(listen, tls)
        handler = type("ConsoleHandler", (_Handler,), {"api": api, "static": _static_files()})
        host, port = split_host_port(listen)
        server_class = type(
            "ConsoleHttpServer",
            (_HttpServer,),
            {"address_family": _family(host)},
        )
        try:
            self._httpd = server_class((host, port), handler)
        except OSError as exc:
            raise AddressInUseError(f"cannot serve the console on {listen}: {exc}") from exc
        self._httpd.tls_context = _tls_context(tls) if tls is not None else None
        bound_port = self._httpd.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        self.address = f"{shown}:{bound_port}"
        self.url = f"{'https' if tls is not None else 'http'}://{self.address}/"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="turnwire-console", daemon=True
        )
        self._stopped = False

    def start(self) -> None:
        self._thread.start()
        log.info("console serving on %s (open it and enter an admin token)", self.url)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join(10)
        self._httpd.server_close()


def _family(host: str) -> int:
    import socket

    return socket.AF_INET6 if ":" in host else socket.AF_INET
