"""The metered ledger: one durable JSON line per executor start.

The `metered` executor appends a line BEFORE it starts the work, so the ledger
over-approximates what ran: a start the runner never confirmed (R3: UNKNOWN)
still counts. Tests, the demo and the invariant oracle count billable
executions with it (PROTOCOL.md §8 invariant 1: at most one start per
operation_id).

One line:

    {"operation_id": "...", "incarnation_id": "...", "attempt": 1,
     "pid": 1234, "started_at": "2026-11-29T11:20:00.123456+00:00", "execution": 1}

``execution`` is the execution's number in its row (PROTOCOL.md R15: a retry
after a failure declared effect NONE is 2, 3, ...); a line without it (written
before R15) is execution 1.

Concurrent appends from threads and processes never interleave: each line is
one write() on an O_APPEND descriptor, shorter than PIPE_BUF, under an
exclusive flock, followed by fsync before the lock is released.
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import select
from dataclasses import asdict, dataclass
from pathlib import Path

# A line must fit in one atomic append (POSIX guarantees PIPE_BUF >= 512; Linux 4096).
MAX_LINE_BYTES = getattr(select, "PIPE_BUF", 4096) - 1
_FIELDS = ("operation_id", "incarnation_id", "attempt", "pid", "started_at")


class LedgerCorruptError(ValueError):
    """A complete ledger line does not parse: the ledger cannot be trusted."""


@dataclass(frozen=True)
class LedgerEntry:
    """One executor start."""

    operation_id: str
    incarnation_id: str
    attempt: int
    pid: int
    started_at: str  # ISO 8601, UTC
    execution: int = 1


def encode_entry(entry: LedgerEntry) -> bytes:
    """The entry as one newline-terminated JSON line; ValueError if too long."""
    line = json.dumps(asdict(entry), separators=(",", ":"), sort_keys=True).encode() + b"\n"
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(f"ledger line is {len(line)} bytes; the limit is {MAX_LINE_BYTES}")
    return line


def append_start(path: Path, entry: LedgerEntry) -> None:
    """Append one line durably (write + fsync) under an exclusive lock."""
    line = encode_entry(entry)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        first_line = os.fstat(fd).st_size == 0
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(f"short ledger write: {written} of {len(line)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the flock
    if first_line:
        _fsync_directory(path.parent)  # make the new file's name durable too


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_ledger(path: Path) -> list[LedgerEntry]:
    """Every complete entry, in order; a missing file is an empty ledger.

    An incomplete last line (no newline: the writer was killed mid-write) is
    ignored; a complete line that does not parse raises LedgerCorruptError.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    *complete, _torn_or_empty = data.split(b"\n")
    return [_decode(line, number) for number, line in enumerate(complete, start=1)]


def _decode(line: bytes, number: int) -> LedgerEntry:
    try:
        record = json.loads(line)
        if not isinstance(record, dict) or set(record) - {"execution"} != set(_FIELDS):
            raise ValueError(f"expected the fields {', '.join(_FIELDS)} (and execution)")
        entry = LedgerEntry(**record)
        if not all(isinstance(getattr(entry, name), str) for name in _FIELDS[:2] + _FIELDS[4:]):
            raise ValueError("operation_id, incarnation_id and started_at must be strings")
        if not all(isinstance(v, int) for v in (entry.attempt, entry.pid, entry.execution)):
            raise ValueError("attempt, pid and execution must be integers")
    except ValueError as error:
        raise LedgerCorruptError(f"ledger line {number} is corrupt: {error}") from error
    return entry


def count_starts(path: Path) -> collections.Counter[str]:
    """How many starts the ledger records for each operation_id."""
    return collections.Counter(entry.operation_id for entry in read_ledger(path))
