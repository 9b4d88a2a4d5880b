"""The due scan against a journal that keeps finished turns: milliseconds a scan.

    python -m bench due_scan [--kept 0,100000,500000,1000000] [--held 10000] [--scans 20]

The coordinator's due scan (``Journal.due``, every ``--idle-poll``, 0.5 s by
default) looks for open turns whose next action is due and finished turns not
yet released. A journal keeps finished turns for ``--retain-terminal`` (a day
by default), so it may hold far more of them than turns in flight. For each
count of kept turns this makes a fresh SQLite journal at the head revision
(the real migrations), puts in that many finished, released turns and
``--held`` RUNNING ones whose next poll is an hour away (rows written straight
into the tables: filling a million through the API would take hours), and
times ``--scans`` calls of the real adapter's ``due()`` (with QUEUED turns and
without, as the scan alternates), printing the median per scan and the share
of one core it costs at one scan every 0.5 s. It prints figures and never
judges speed.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from coordinator_svc.storage import migrate, open_journal
from coordinator_svc.storage.tables import operations

SCAN_EVERY = 0.5  # the coordinator's default --idle-poll
NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def _row(index: int, state: str, columns: Sequence[str]) -> tuple[object, ...]:
    created = (NOW - timedelta(hours=20, microseconds=-index)).strftime("%Y-%m-%d %H:%M:%S.%f")
    values: dict[str, object] = dict.fromkeys(columns)
    values.update(
        operation_id=f"op_{index:032d}", principal="bench", idempotency_key_digest=f"{index:064d}",
        request_digest="0" * 64, envelope_digest="0" * 64, pool="default", kind="WRITABLE",
        replay_policy="PROBE_FIRST", max_attempts=5, state=state, execution="STARTED",
        created_at=created, updated_at=created, attempt_count=1, acknowledged=True,
        fencing_token=1, version=3, cancel_requested=False, last_event_sequence=3,
        execution_count=1, released=state != "RUNNING",
        next_action_at=(NOW + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S.%f")
        if state == "RUNNING" else None,
        finished_at=created if state != "RUNNING" else None,
    )  # fmt: skip
    return tuple(values[name] for name in columns)


def fill(path: Path, kept: int, held: int) -> None:
    """Write ``kept`` finished, released turns and ``held`` RUNNING ones."""
    columns = [column.name for column in operations.columns]
    insert = (
        f"INSERT INTO operations ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"
    )
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA foreign_keys = OFF")  # events and envelopes are not read here
        db.executemany(insert, (_row(i, "SUCCEEDED", columns) for i in range(kept)))
        db.executemany(insert, (_row(kept + i, "RUNNING", columns) for i in range(held)))
        db.commit()
    # No ANALYZE: the coordinator never runs it, so its planner has no
    # statistics either (with them, a journal of nothing but RUNNING turns
    # makes SQLite think the state index useless and read the table).


async def time_scans(url: str, scans: int) -> float:
    """Median seconds a due() call takes (alternating with and without QUEUED)."""
    journal = open_journal(url)
    try:
        taken = []
        for index in range(scans):
            started = time.perf_counter()
            due = await journal.due(NOW, 512, queued=index % 2 == 0)
            taken.append(time.perf_counter() - started)
            if due:
                raise RuntimeError(f"{len(due)} turns due: the bench's rows are wrong")
        return statistics.median(taken)
    finally:
        await journal.close()


def counts(text: str) -> list[int]:
    found = [int(part) for part in text.split(",") if part.strip()]
    if not found or any(count < 0 for count in found):
        raise argparse.ArgumentTypeError(f"counts must be integers >= 0, got {text!r}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench due_scan", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--kept", type=counts, default=[0, 100_000, 500_000, 1_000_000],
        help="finished turns the journal keeps, one fresh journal each "
        "(default 0,100000,500000,1000000)",
    )  # fmt: skip
    parser.add_argument("--held", type=int, default=10_000, help="RUNNING turns (default 10000)")
    parser.add_argument(
        "--scans", type=int, default=20, help="scans timed per journal (default 20)"
    )
    args = parser.parse_args(argv)
    print(f"due scan, {args.held} turns held; median of {args.scans} scans")
    print(f"{'kept':>9} | {'ms a scan':>9} | {'core share at 2 scans/s':>23}")
    with tempfile.TemporaryDirectory(prefix="turnwire-due-scan-") as scratch:
        for kept in args.kept:
            path = Path(scratch) / f"journal-{kept}.db"
            url = f"sqlite:///{path}"
            migrate(url)
            fill(path, kept, args.held)
            seconds = asyncio.run(time_scans(url, args.scans))
            print(f"{kept:>9} | {seconds * 1000:>9.2f} | {seconds / SCAN_EVERY:>23.1%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
