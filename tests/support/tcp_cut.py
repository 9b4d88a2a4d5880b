"""A TCP proxy on 127.0.0.1 that can lose one reply: the request reaches the
server, its answer never reaches the client, and the connection is cut.

For the case no client can tell apart from a dead connection: the server ran
the statement (and, in autocommit, committed it), the client saw only the
connection close. Runs on the test's event loop; the code under test talks to
it from its own threads.

    proxy = await TcpCutProxy.start("127.0.0.1", server_port)
    proxy.lose_next_reply(b"UPDATE")  # the next request with these bytes, from any
    ...                               # client: forwarded, its reply dropped, that
                                      # connection closed
    await proxy.stop()
"""

from __future__ import annotations

import asyncio
import contextlib

CHUNK = 65536


class TcpCutProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._server: asyncio.Server | None = None
        self._armed: bytes | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.replies_lost = 0
        self.port = 0

    @classmethod
    async def start(cls, upstream_host: str, upstream_port: int) -> TcpCutProxy:
        proxy = cls(upstream_host, upstream_port)
        proxy._server = await asyncio.start_server(proxy._serve, "127.0.0.1", 0)
        proxy.port = proxy._server.sockets[0].getsockname()[1]
        return proxy

    def lose_next_reply(self, containing: bytes) -> None:
        """Lose the reply to the next request whose bytes contain ``containing``
        (by content, so a new connection's startup is never the one)."""
        self._armed = containing

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self._upstream)
        self._writers |= {client_w, server_w}
        # Set when a request was forwarded under the arm: its reply is dropped.
        cut = asyncio.Event()

        async def upward() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await client_r.read(CHUNK):
                    if self._armed is not None and self._armed in data and not cut.is_set():
                        self._armed = None
                        cut.set()
                    server_w.write(data)
                    await server_w.drain()

        async def downward() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await server_r.read(CHUNK):
                    if cut.is_set():
                        self.replies_lost += 1
                        return  # the reply is lost; closing both ends cuts the connection
                    client_w.write(data)
                    await client_w.drain()

        pumps = [asyncio.ensure_future(upward()), asyncio.ensure_future(downward())]
        for pump in pumps:
            self._tasks.add(pump)
            pump.add_done_callback(self._tasks.discard)
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pumps:
            pump.cancel()
        for writer in (client_w, server_w):
            writer.close()
            self._writers.discard(writer)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        if self._server is not None:
            await self._server.wait_closed()
