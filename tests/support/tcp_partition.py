"""A TCP forwarder on 127.0.0.1 that can be partitioned: bytes stop flowing.

Put in front of PostgreSQL for one coordinator replica, it is that replica's
network path to the journal. ``partition()`` stops forwarding in both
directions and holds every connection open, as a cut cable does (a query in
flight hangs; nothing errors at once); connections made meanwhile are
accepted and get nothing. ``heal()`` closes what it held (the replica's
driver sees its connections die and opens new ones) and forwards again.

Runs in a thread of its own (the test's processes talk to it; the test may
be synchronous). Every socket it opens is closed by ``stop()``.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading

CHUNK = 65536
POLL_SECONDS = 0.05


class TcpPartition:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._peer: dict[socket.socket, socket.socket] = {}
        self._lock = threading.Lock()
        self._cut = False
        self._heal_pending = False
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="tcp-partition", daemon=True)
        self._thread.start()

    def partition(self) -> None:
        with self._lock:
            self._cut = True

    def heal(self) -> None:
        with self._lock:
            self._cut = False
            self._heal_pending = True

    def stop(self) -> None:
        self._running = False
        self._thread.join(10)
        for sock in list(self._peer):
            self._close(sock)
        self._selector.close()
        self._listener.close()

    def _loop(self) -> None:
        while self._running:
            with self._lock:
                cut, heal, self._heal_pending = self._cut, self._heal_pending, False
            if heal:
                for held in list(self._peer):
                    self._close(held)
            for key, _ in self._selector.select(POLL_SECONDS):
                ready = key.fileobj
                if not isinstance(ready, socket.socket):
                    continue
                if ready is self._listener:
                    self._accept(cut)
                elif not cut:
                    self._forward(ready)
            if cut:
                # Nothing is read while cut: avoid spinning on readable sockets.
                threading.Event().wait(POLL_SECONDS)

    def _accept(self, cut: bool) -> None:
        with contextlib.suppress(BlockingIOError):
            client, _ = self._listener.accept()
            if cut:
                # Held open, never forwarded (registered so heal() closes it).
                self._peer[client] = client
                return
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                client.close()
                return
            for sock in (client, upstream):
                sock.setblocking(False)
                self._selector.register(sock, selectors.EVENT_READ)
            self._peer[client] = upstream
            self._peer[upstream] = client

    def _forward(self, sock: socket.socket) -> None:
        peer = self._peer.get(sock)
        if peer is None:
            return
        try:
            data = sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(sock)
            return
        try:
            peer.setblocking(True)
            peer.sendall(data)
            peer.setblocking(False)
        except OSError:
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        peer = self._peer.pop(sock, None)
        for one in (sock, peer):
            if one is None:
                continue
            self._peer.pop(one, None)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(one)
            with contextlib.suppress(OSError):
                one.close()
