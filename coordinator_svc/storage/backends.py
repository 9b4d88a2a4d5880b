"""What differs between SQLite and PostgreSQL, in two small classes.

Everything else in ``sql.SqlJournal`` is the same code on both (the SQL text
differs only where ``statements`` says). A backend knows how to make a
correctly configured engine, how to begin, commit and roll back a
transaction on a raw DBAPI connection, which driver errors mean "the
database failed", and how many threads may talk to the database at once.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Protocol

import psycopg
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

# Connection execution option: this transaction only reads (SQLite then
# skips the write lock). Writes are the default, so a forgotten flag costs
# concurrency, never correctness.
READ_ONLY = "turnwire_read_only"


class Backend(Protocol):
    name: str
    # Threads that may use the engine at once (the journal's executor size).
    worker_threads: int

    # What the driver raises when the database fails (-> JournalUnavailable).
    driver_errors: tuple[type[Exception], ...]

    def make_engine(self, url: sa.URL, busy_timeout: float) -> Engine: ...

    def prepare_raw(self, connection: Any) -> None:
        """Ready a DBAPI connection the journal keeps for its thread."""
        ...

    def begin(self, cursor: Any, write: bool) -> bool:
        """Open the transaction; False when the one statement of a read is
        its own transaction already (nothing to commit)."""
        ...

    def commit(self, cursor: Any) -> None: ...

    def rollback(self, cursor: Any) -> None: ...

    def is_broken(self, connection: Any) -> bool:
        """After a driver error: must this connection be thrown away?"""
        ...


class SqliteBackend:
    name = "sqlite"
    # SQLite has one writer at a time anyway; one thread and one connection
    # means no SQLITE_BUSY between our own writers.
    worker_threads = 1

    def make_engine(self, url: sa.URL, busy_timeout: float) -> Engine:
        engine = sa.create_engine(url, connect_args={"check_same_thread": False})
        timeout_ms = max(int(busy_timeout * 1000), 0)

        @event.listens_for(engine, "connect")
        def configure(dbapi_connection: Any, _record: Any) -> None:
            # Stop the sqlite3 driver from issuing its own BEGIN (it skips it
            # before SELECT and DDL); the "begin" hook below issues ours.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            try:
                # WAL: readers never block the writer nor the writer them, and
                # a crash mid-commit leaves the last committed state.
                cursor.execute("PRAGMA journal_mode=WAL")
                # FULL: fsync the WAL at every commit. C1 replies only after the
                # operation is durable; NORMAL could lose the last commits on
                # power loss.
                cursor.execute("PRAGMA synchronous=FULL")
                # Another process (a second coordinator, the CLI) may hold the
                # write lock briefly: wait for it instead of failing at once.
                cursor.execute(f"PRAGMA busy_timeout={timeout_ms}")
                # SQLite ignores REFERENCES unless asked, per connection: an
                # attempt or event must belong to an operation.
                cursor.execute("PRAGMA foreign_keys=ON")
            finally:
                cursor.close()

        @event.listens_for(engine, "begin")
        def begin(connection: sa.Connection) -> None:
            # IMMEDIATE takes the write lock up front, so a transaction never
            # reads, then fails to upgrade to writing (a deadlock busy_timeout
            # cannot resolve); this is also the claim lock of §5.
            read_only = connection.get_execution_options().get(READ_ONLY, False)
            connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

        return engine

    driver_errors: tuple[type[Exception], ...] = (sqlite3.Error,)

    def prepare_raw(self, connection: Any) -> None:
        pass  # the "connect" hook above set everything

    def begin(self, cursor: Any, write: bool) -> bool:
        # IMMEDIATE takes the write lock up front (see the hook above); a
        # read is one SELECT, atomic on its own in WAL mode.
        if write:
            cursor.execute("BEGIN IMMEDIATE")
        return write

    def commit(self, cursor: Any) -> None:
        cursor.execute("COMMIT")

    def rollback(self, cursor: Any) -> None:
        cursor.execute("ROLLBACK")

    def is_broken(self, connection: Any) -> bool:
        return False  # a file database stays usable after a failed statement

    @staticmethod
    def database_file(url: sa.URL) -> Path | None:
        """The file a URL names, or None for an in-memory database."""
        database = url.database or ""
        if database in ("", ":memory:") or database.startswith("file:"):
            return None
        return Path(database)


# The server's probes of a silent journal client (PostgresBackend): one a second,
# three unanswered end the session and free its row locks.
KEEPALIVE_INTERVAL_SECONDS = 1
KEEPALIVE_PROBES = 3


def _keepalive_idle(busy_timeout: float) -> int:
    """Seconds of silence before the server's first probe: twice the busy timeout."""
    return max(1, round(2 * busy_timeout))


class PostgresBackend:
    name = "postgresql"
    # Real concurrency: CAS updates and SKIP LOCKED sort writers out.
    worker_threads = 8

    def make_engine(self, url: sa.URL, busy_timeout: float) -> Engine:
        timeout_ms = max(int(busy_timeout * 1000), 1)
        idle = _keepalive_idle(busy_timeout)
        silent_ms = (idle + KEEPALIVE_PROBES * KEEPALIVE_INTERVAL_SECONDS) * 1000
        return sa.create_engine(
            url,
            # A dropped connection (server restart, failover) is noticed at
            # checkout and replaced, instead of failing the next write.
            pool_pre_ping=True,
            pool_size=self.worker_threads,
            max_overflow=0,
            connect_args={
                # Fail fast when the server is gone: a bounded wait, then
                # JournalUnavailable, never a hang.
                "connect_timeout": max(int(busy_timeout), 1),
                # lock_timeout is busy_timeout's twin: a row lock another
                # replica holds too long fails the write instead of stalling.
                # statement_timeout bounds anything else a sick server does.
                # idle_in_transaction_session_timeout ends a transaction this
                # process left open (it was partitioned from the server, or
                # stopped, between two statements): the server would otherwise
                # keep its row locks until TCP keepalive noticed, and the other
                # replicas' SKIP LOCKED claims would pass over every operation
                # it had locked (a lease renewal locks them all) for that long.
                # No timeout covers a pipeline cut between two of its statements
                # (the server waits for the rest with the implicit transaction's
                # locks held): the server's own TCP keepalive does, so it probes
                # a silent client after twice the busy timeout and drops it after
                # three unanswered probes a second apart (on a TCP connection).
                "options": (
                    f"-c lock_timeout={timeout_ms} -c statement_timeout={timeout_ms * 6} "
                    f"-c idle_in_transaction_session_timeout={timeout_ms * 2} "
                    f"-c tcp_keepalives_idle={idle} "
                    f"-c tcp_keepalives_interval={KEEPALIVE_INTERVAL_SECONDS} "
                    f"-c tcp_keepalives_count={KEEPALIVE_PROBES} "
                    f"-c tcp_user_timeout={silent_ms}"
                ),
            },
        )

    driver_errors: tuple[type[Exception], ...] = (psycopg.Error,)

    def prepare_raw(self, connection: Any) -> None:
        # Autocommit, with explicit BEGIN/COMMIT around writes: a read is one
        # round trip instead of three (BEGIN, SELECT, ROLLBACK).
        connection.rollback()
        connection.autocommit = True

    def begin(self, cursor: Any, write: bool) -> bool:
        if write:
            cursor.execute("BEGIN")
        return write

    def commit(self, cursor: Any) -> None:
        cursor.execute("COMMIT")

    def rollback(self, cursor: Any) -> None:
        cursor.execute("ROLLBACK")

    def is_broken(self, connection: Any) -> bool:
        return bool(connection.closed or connection.broken)


def backend_for(url: sa.URL) -> SqliteBackend | PostgresBackend:
    if url.get_backend_name() == "sqlite":
        return SqliteBackend()
    if url.get_backend_name() == "postgresql":
        return PostgresBackend()
    raise ValueError(
        f"journal URL must be sqlite:///PATH or postgresql+psycopg://..., got {url.drivername}"
    )
