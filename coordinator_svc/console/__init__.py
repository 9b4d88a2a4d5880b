"""The operator's console: a web page served by the coordinator (issue 13).

``--console-listen HOST:PORT`` starts it beside the gRPC API. The page
(``static/``: HTML, vanilla JavaScript and CSS, no build step, nothing fetched
from elsewhere) asks for an admin token, keeps it in the tab's
sessionStorage, and reads everything through the JSON API (``api.py``), which
calls this coordinator's own TurnService and AdminService with that token
(``upstream.py``). docs/CONSOLE.md describes each view.
"""

from __future__ import annotations

from coordinator_svc.api.auth import Authenticator
from coordinator_svc.console.api import ConsoleApi
from coordinator_svc.console.server import ConsoleServer, check_console_address
from coordinator_svc.console.upstream import open_channel
from turnwire.transport_security import TlsMaterial

__all__ = ["ConsoleServer", "RunningConsole", "check_console_address", "start_console"]


class RunningConsole:
    """The console's server and its channel to the coordinator. ``stop()`` is idempotent."""

    def __init__(self, server: ConsoleServer, channel: object) -> None:
        self.server = server
        self._channel = channel

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def address(self) -> str:
        return self.server.address

    def stop(self) -> None:
        self.server.stop()
        close = getattr(self._channel, "close", None)
        if callable(close):
            close()


def start_console(
    listen: str,
    coordinator_address: str,
    authenticator: Authenticator,
    tls: TlsMaterial | None = None,
) -> RunningConsole:
    """Serve the console on ``listen``, reading from the coordinator at
    ``coordinator_address`` (TLS with ``tls``, as its API serves)."""
    channel = open_channel(coordinator_address, tls)
    try:
        server = ConsoleServer(listen, ConsoleApi(channel, authenticator), tls)
    except BaseException:
        channel.close()
        raise
    server.start()
    return RunningConsole(server, channel)
