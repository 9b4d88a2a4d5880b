"""The journal's kept DBAPI connections: one per worker thread (storage/sql.py)."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from sqlalchemy.engine import Engine

from coordinator_svc.storage.backends import Backend


class KeptConnections:
    """One DBAPI connection per worker thread, kept checked out of the pool."""

    def __init__(self, engine: Engine, backend: Backend) -> None:
        self._engine = engine
        self._backend = backend
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[Any] = set()

    def current(self) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._engine.raw_connection()
            try:
                self._backend.prepare_raw(connection.dbapi_connection)
            except BaseException:
                connection.invalidate()
                raise
            self._local.connection = connection
            with self._lock:
                self._open.add(connection)
        return connection

    def drop(self) -> None:
        """Forget this thread's connection after it failed: never reuse a
        connection whose state is unknown."""
        connection = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            with self._lock:
                self._open.discard(connection)
            # Already broken: the pool makes a new one when next asked.
            with contextlib.suppress(Exception):
                connection.invalidate()

    def close_all(self) -> None:
        with self._lock:
            connections, self._open = self._open, set()
        for connection in connections:
            with contextlib.suppress(Exception):  # closing at shutdown: nothing to keep
                connection.close()
