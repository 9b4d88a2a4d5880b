"""What a turn's envelope size costs the journal's writes, out of the row and in it (issue 12).

Envelopes live in ``operation_envelopes``, out of the row every commit rewrites.

    .venv/bin/python -m bench envelope_rows [--turns N] [--sizes 0,65536,1048576]

On a SQLite journal in a temporary directory (WAL, synchronous=FULL: the
journal's own settings), for each envelope size it writes N turns' happy
path one turn at a time through the real journal (``open_journal``): the
submit (C1), the attempt written ahead (C4) and the move to RUNNING, and
prints milliseconds per turn and per write, with the ratio to the smallest
size measured in the same run. For contrast it then times the same three
writes on a bare table that keeps the envelope in the row (the layout before
0004), where SQLite rewrites the whole record, envelope included, on every
UPDATE.

It prints figures and never judges speed: exit 0 unless something broke.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sqlite3
import tempfile
import time
from pathlib import Path

from coordinator_svc.core.model import AttemptOutcome, AttemptUpdate, OpState
from coordinator_svc.storage import migrate, open_journal
from turnwire.testing.records import dispatch, first_event, new_operation, transition

WRITES_PER_TURN = 3


async def journal_ms_per_turn(url: str, size: int, first: int, turns: int) -> float:
    journal = open_journal(url)
    envelope = os.urandom(size)
    try:
        started = time.perf_counter()
        for number in range(first, first + turns):
            operation = dataclasses.replace(new_operation(number), envelope=envelope)
            stored, _ = await journal.submit(operation, first_event(operation))
            dispatched = await journal.commit(dispatch(stored))
            accepted = (AttemptUpdate(1, AttemptOutcome.ACCEPTED, "ok"),)
            running = await journal.commit(
                transition(dispatched, OpState.RUNNING, attempt_updates=accepted)
            )
            assert running.state is OpState.RUNNING and running.envelope == envelope
        return (time.perf_counter() - started) * 1000 / turns
    finally:
        await journal.close()


def in_row_ms_per_turn(directory: Path, size: int, turns: int) -> float:
    """The three writes on a table that keeps the envelope in the row."""
    path = directory / f"in-row-{size}.db"
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute(
            "CREATE TABLE ops (id INTEGER PRIMARY KEY, state TEXT, version INT, envelope BLOB)"
        )
        envelope = os.urandom(size)
        started = time.perf_counter()
        for number in range(turns):
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("INSERT INTO ops VALUES (?, 'QUEUED', 1, ?)", (number, envelope))
            connection.execute("COMMIT")
            for state in ("DISPATCHING", "RUNNING"):
                connection.execute("BEGIN IMMEDIATE")
                connection.execute(
                    "UPDATE ops SET state = ?, version = version + 1 WHERE id = ?",
                    (state, number),
                )
                connection.execute("COMMIT")
        return (time.perf_counter() - started) * 1000 / turns
    finally:
        connection.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="turns per size (3 writes each)")
    parser.add_argument(
        "--sizes",
        default="0,65536,1048576",
        help="envelope sizes in bytes, comma-separated (default 0,65536,1048576)",
    )
    args = parser.parse_args(argv)
    try:
        sizes = [int(part) for part in args.sizes.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--sizes must be integers, got {args.sizes!r}")
    if args.turns < 1 or not sizes or min(sizes) < 0:
        parser.error("--turns must be at least 1 and every size at least 0")
    with tempfile.TemporaryDirectory(prefix="turnwire-envelope-bench-") as tmp:
        directory = Path(tmp)
        url = f"sqlite:///{directory / 'journal.db'}"
        migrate(url)
        asyncio.run(journal_ms_per_turn(url, 0, 1_000_000, min(50, args.turns)))  # warm up
        print(f"{'envelope':>10}  {'journal ms/turn':>15}  {'x smallest':>10}"
              f"  {'in-row ms/turn':>14}  {'x smallest':>10}")  # fmt: skip
        base_journal = base_row = 0.0
        for index, size in enumerate(sizes):
            first = 1 + index * args.turns
            journal = asyncio.run(journal_ms_per_turn(url, size, first, args.turns))
            in_row = in_row_ms_per_turn(directory, size, args.turns)
            base_journal = base_journal or journal
            base_row = base_row or in_row
            print(
                f"{size:>10}  {journal:>15.2f}  {journal / base_journal:>10.2f}"
                f"  {in_row:>14.2f}  {in_row / base_row:>10.2f}",
                flush=True,
            )
    print(
        f"({args.turns} turns per size, {WRITES_PER_TURN} durable writes each, one at a time; "
        "journal: the real SqlJournal on SQLite; in-row: a bare table with the envelope in the row)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
