"""Connections to a runner store file: the pragmas every one carries (R3).

The SQLAlchemy engine serves the store's cold paths (schema, open, ownership,
floor, executor records); the raw connection serves the per-turn statements
(rows_sql.py, issue 10). Both carry the same pragmas.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event as sa_event

# How long a connection waits for SQLite's own lock before failing (ms). Only
# this process writes (the OS lock), so a wait means a checkpoint or a reader.
BUSY_TIMEOUT_MS = 5000
READ_OPTION = "turnwire_read_only"


def set_pragmas(dbapi_connection: sqlite3.Connection) -> None:
    """The pragmas every connection to the store carries, raw or SQLAlchemy's."""
    # We issue BEGIN ourselves (SQLAlchemy's "begin" event below, or the raw
    # write path): the driver must not open transactions on its own.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    # WAL: readers (status, watch) never block the writer and vice versa.
    cursor.execute("PRAGMA journal_mode=WAL")
    # FULL: fsync the WAL at every commit; "accepted" must survive power loss (R3).
    cursor.execute("PRAGMA synchronous=FULL")
    # Wait for a checkpoint or a reader instead of failing at once.
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    # Constraints are part of the contract; SQLite ignores them unless asked.
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def connect_raw(path: Path) -> sqlite3.Connection:
    """The store's own connection for the per-turn statements (rows_sql.py)."""
    connection = sqlite3.connect(
        path,
        isolation_level=None,
        # Opened on the thread that opens the store, then used by the store's
        # one thread; every use holds the store's connection lock.
        check_same_thread=False,
        # Room for every fixed statement: each is prepared once.
        cached_statements=32,
    )
    try:
        set_pragmas(connection)
    except BaseException:
        connection.close()
        raise
    return connection


def make_engine(path: Path) -> sa.Engine:
    """An engine whose connections carry the pragmas the dedupe store needs."""
    engine = sa.create_engine(
        f"sqlite:///{path}",
        # The service thread and test threads share the engine; SQLite
        # connections are still used by one thread at a time.
        connect_args={"check_same_thread": False},
    )

    @sa_event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        set_pragmas(dbapi_connection)

    @sa_event.listens_for(engine, "begin")
    def _begin(connection: sa.Connection) -> None:
        # IMMEDIATE takes the write lock up front: a read-then-write
        # transaction can never be overtaken between its read and its write.
        mode = "DEFERRED" if connection.get_execution_options().get(READ_OPTION) else "IMMEDIATE"
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine
