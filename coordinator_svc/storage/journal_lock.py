"""One coordinator per SQLite journal (issue 12): an exclusive OS lock beside the file.

A SQLite journal has one writer process: its coordinator is the only
replica, takes no leases (§5) and runs C12 recovery over every operation at
start. A second coordinator on the same file would recover the first one's
live dispatches as its own, so it is refused before it opens the journal:
``<journal>.lock`` is held with ``flock`` for the coordinator's whole life
(released by the kernel if the process dies, so a crash never leaves it
stale) and names the holder's PID for the error message.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from coordinator_svc.ports import JournalError


class JournalLocked(JournalError):
    """Another coordinator process holds this SQLite journal."""


class JournalLock:
    """An exclusive lock on ``<journal path>.lock``; ``release()`` is idempotent."""

    def __init__(self, journal_file: Path) -> None:
        self.path = journal_file.with_name(journal_file.name + ".lock")
        self._fd: int | None = None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise JournalLocked(
                f"the SQLite journal {journal_file} is in use by another coordinator"
                f"{f' (pid {holder})' if holder else ''}: a SQLite journal serves one "
                "coordinator. Stop that one first, or run several replicas on a PostgreSQL "
                "journal (README, Replicas)"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor releases the flock


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""


def lock_journal(url: str) -> JournalLock | None:
    """The lock for a SQLite journal file at ``url``; None for PostgreSQL or in-memory."""
    from coordinator_svc.storage.backends import SqliteBackend
    from coordinator_svc.storage.schema import journal_url

    parsed = journal_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    path = SqliteBackend.database_file(parsed)
    if path is None:
        return None
    return JournalLock(path)
