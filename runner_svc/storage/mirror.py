"""An in-memory mirror of part of the runner store, so reads need no SQL (issue 10).

Why a mirror may answer at all: this process is the store's only writer (the
OS lock, §6), and every write of this incarnation is fenced by ownership, so
once a row has been read or written here nothing else changes it. The store
updates the mirror only after a COMMIT succeeded (a failed write leaves it as
it was), and before the write returns, so a read never sees a row older than
one whose write was already reported to a caller. A COMMIT that fails may
still have landed: the mirror then forgets everything (``lose_track``) until
the next write finds the store's real sequence (``rebase``).

Two parts, each bounded by a count and by ``BYTES_KEPT`` (they share row
objects, so together they hold at most twice that):

- **rows**: the most recently used rows by operation id (LRU by count and by
  bytes). Absence is never kept: an id not here is asked of SQL.
- **window**: the most recent changes in sequence order, each operation at its
  latest change only (like ``changes_after``). It holds every row whose
  sequence is above ``floor``; ``changes_after(after)`` with ``after >= floor``
  is answered from it, an older cursor is asked of SQL.

Thread-safe: the store's thread writes it, the event loop reads it (one lock,
never held across I/O). ``disable`` turns it off for good when this
incarnation learns it no longer owns the store: from then on another process
may write, and only SQL knows what it wrote.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from runner_svc.core.model import OperationRow

# Defaults sized for a busy runner: a few thousand turns in flight or just
# finished are served from memory; older ones cost one SQL read.
ROWS_KEPT = 4096
CHANGES_KEPT = 4096
# Results can be large (up to the message limits): the bytes held are bounded
# too, not only the count of rows.
BYTES_KEPT = 32 * 1024 * 1024
_ROW_OVERHEAD = 512  # a rough size of a row without its payloads


def row_weight(row: OperationRow) -> int:
    """About the bytes a row holds in memory (its payloads dominate)."""
    weight = _ROW_OVERHEAD + len(row.operation_id)
    if row.result is not None:
        weight += len(row.result.output) + sum(
            len(k) + len(v) for k, v in row.result.metadata.items()
        )
    if row.error is not None:
        weight += len(row.error.message)
    return weight


class StoreMirror:
    def __init__(
        self,
        last_sequence: int,
        *,
        newest_row: int = 0,
        rows_kept: int = ROWS_KEPT,
        changes_kept: int = CHANGES_KEPT,
        bytes_kept: int = BYTES_KEPT,
    ) -> None:
        self._lock = threading.Lock()
        self._rows_kept = rows_kept
        self._changes_kept = changes_kept
        self._bytes_kept = bytes_kept
        self._enabled = True
        self._rows: OrderedDict[str, OperationRow] = OrderedDict()
        self._rows_bytes = 0
        # sequence -> row, ascending; and each operation's entry in it.
        self._window: OrderedDict[int, OperationRow] = OrderedDict()
        self._window_bytes = 0
        self._window_seq: dict[str, int] = {}
        # Every change with a sequence above the floor is in the window; None:
        # unknown (after a write whose outcome is unsure), ask SQL. Never below
        # a row in the file: a file edited by hand may hold rows past its counter.
        self._floor: int | None = max(last_sequence, newest_row)
        # The store's last sequence as far as this mirror knows (None: unknown).
        self._last: int | None = last_sequence

    # --- reads (any thread) ------------------------------------------------

    def row(self, operation_id: str) -> OperationRow | None:
        """The row if it is in memory; None means "ask SQL", never "absent"."""
        with self._lock:
            row = self._rows.get(operation_id)
            if row is not None:
                self._rows.move_to_end(operation_id)
            return row

    def rows(self, operation_ids: Iterable[str]) -> dict[str, OperationRow] | None:
        """All of them if every one is in memory, else None (one answer, one moment)."""
        found: dict[str, OperationRow] = {}
        with self._lock:
            for operation_id in operation_ids:
                row = self._rows.get(operation_id)
                if row is None:
                    return None
                self._rows.move_to_end(operation_id)
                found[operation_id] = row
        return found

    def changes_after(self, sequence: int, limit: int) -> list[OperationRow] | None:
        """What ``changes_after`` returns, if the window covers ``sequence``; else None."""
        with self._lock:
            if self._floor is None or sequence < self._floor:
                return None
            newer: list[OperationRow] = []
            for seq in reversed(self._window):  # the newest first: stop at the cursor
                if seq <= sequence:
                    break
                newer.append(self._window[seq])
        newer.reverse()
        return newer if limit < 0 else newer[:limit]  # SQLite: a negative LIMIT is none

    # --- updates (the store's thread, with the store's connection held) -----

    def is_current(self, last_sequence: int) -> bool:
        """Whether the store's sequence is where this mirror left it."""
        with self._lock:
            return self._enabled and self._last == last_sequence

    def rebase(self, last_sequence: int, newest_row: int) -> None:
        """Forget everything: the store moved without this mirror (a write whose
        outcome was unsure). Start again from the store as it is now: its
        counter, and the highest sequence of any row in it."""
        with self._lock:
            self._clear()
            if self._enabled:
                self._last = last_sequence
                self._floor = max(last_sequence, newest_row)

    def lose_track(self) -> None:
        """A COMMIT failed: it may or may not have landed, so ask SQL until the next
        write finds the store's sequence again (``rebase``)."""
        with self._lock:
            self._clear()
            self._floor = self._last = None

    def disable(self) -> None:
        """This incarnation was fenced out (§6): another process writes now."""
        with self._lock:
            self._enabled = False
            self._clear()
            self._floor = self._last = None

    def written(self, row: OperationRow) -> None:
        """A committed write: the row at its new (next) sequence."""
        with self._lock:
            if not self._enabled:
                return
            self._keep_row(row)
            old = self._window_seq.pop(row.operation_id, None)
            if old is not None:
                self._window_bytes -= row_weight(self._window.pop(old))
            self._window[row.sequence] = row
            self._window_seq[row.operation_id] = row.sequence
            self._window_bytes += row_weight(row)
            while self._window and (
                len(self._window) > self._changes_kept or self._window_bytes > self._bytes_kept
            ):
                seq, evicted = self._window.popitem(last=False)
                del self._window_seq[evicted.operation_id]
                self._window_bytes -= row_weight(evicted)
                # Every row above it is still here.
                self._floor = seq if self._floor is None else max(self._floor, seq)
            self._last = row.sequence

    def forget(self, operation_ids: Iterable[str]) -> None:
        """Rows retention deleted (§9 K2): gone from memory as from SQL. The window
        keeps covering its range: SQL no longer has these rows either."""
        with self._lock:
            for operation_id in operation_ids:
                row = self._rows.pop(operation_id, None)
                if row is not None:
                    self._rows_bytes -= row_weight(row)
                seq = self._window_seq.pop(operation_id, None)
                if seq is not None:
                    self._window_bytes -= row_weight(self._window.pop(seq))

    def read(self, rows: Iterable[OperationRow]) -> None:
        """Rows just read from SQL (on the store's thread, so no write is between)."""
        with self._lock:
            if self._enabled:
                for row in rows:
                    self._keep_row(row)

    # --- internals (lock held) -----------------------------------------------

    def _keep_row(self, row: OperationRow) -> None:
        old = self._rows.pop(row.operation_id, None)
        if old is not None:
            self._rows_bytes -= row_weight(old)
        self._rows[row.operation_id] = row
        self._rows_bytes += row_weight(row)
        while self._rows and (
            len(self._rows) > self._rows_kept or self._rows_bytes > self._bytes_kept
        ):
            _, evicted = self._rows.popitem(last=False)
            self._rows_bytes -= row_weight(evicted)

    def _clear(self) -> None:
        self._rows.clear()
        self._rows_bytes = 0
        self._window.clear()
        self._window_seq.clear()
        self._window_bytes = 0
