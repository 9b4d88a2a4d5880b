"""A turn's three journal writes on PostgreSQL: one statement each, or BEGIN ... COMMIT.

    .venv/bin/python -m bench journal_writes [--turns N] [--rounds R]

Starts a throwaway PostgreSQL cluster (turnwire/testing/postgres.py), then, in
alternating rounds on the real journal (``open_journal``), writes N turns'
worth of the happy path, one turn at a time and 16 turns at once: the
submit (C1), the attempt written ahead (C4) and the move to RUNNING that
closes the attempt. Each round runs once with the journal's one-statement
writes (``coordinator_svc/storage/single_statement.py``, the default: with
16 turns at once, the writes that queue together share a pipeline) and once
without (``one_statement_writes=False``: BEGIN, each statement, COMMIT, the
writes side by side on the pool). Per write it prints the wall time, the CPU
of this process (the coordinator's side) and the CPU of the server (the
postmaster and its backends).

It prints figures and never judges speed: exit 0 unless something broke.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from bench.ab_rounds import Figures, alternating, cluster_missing, medians, throwaway_cluster
from bench.e2e_processes import tree_cpu_seconds
from coordinator_svc.core.model import AttemptOutcome, AttemptUpdate, OpState
from coordinator_svc.storage import migrate, open_journal
from turnwire.testing.records import (
    dispatch,
    first_event,
    new_operation,
    transition,
)

WRITES_PER_TURN = 3
MODES = ("one statement", "BEGIN ... COMMIT")


async def one_round(
    url: str, postmaster: int, mode: str, first: int, turns: int, in_flight: int
) -> list[float]:
    """[wall ms, this process CPU ms, server CPU ms] per write over ``turns`` turns."""
    journal = open_journal(url, one_statement_writes=mode == MODES[0])
    gate = asyncio.Semaphore(in_flight)

    async def one_turn(number: int) -> None:
        async with gate:
            operation = new_operation(number)
            stored, _ = await journal.submit(operation, first_event(operation))
            dispatched = await journal.commit(dispatch(stored))
            accepted = (AttemptUpdate(1, AttemptOutcome.ACCEPTED, "ok"),)
            running = await journal.commit(
                transition(dispatched, OpState.RUNNING, attempt_updates=accepted)
            )
            assert running.state is OpState.RUNNING

    try:
        server_before = tree_cpu_seconds({"server": postmaster})["server"]
        cpu_before, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one_turn(n) for n in range(first, first + turns)))
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_before
        server = tree_cpu_seconds({"server": postmaster})["server"] - server_before
    finally:
        await journal.close()
    writes = turns * WRITES_PER_TURN
    return [wall * 1000 / writes, cpu * 1000 / writes, server * 1000 / writes]


async def measure(url: str, postmaster: int, turns: int, rounds: int) -> Figures:
    first = 1

    async def round_of(mode: str, in_flight: int) -> list[float]:
        nonlocal first
        start, first = first, first + turns  # fresh operations every round
        return await one_round(url, postmaster, mode, start, turns, in_flight)

    return await alternating(MODES, rounds, round_of, "journal-writes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000, help="turns per round (3 writes each)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each mode once per round")
    args = parser.parse_args(argv)
    if args.turns < 1 or args.rounds < 1:
        parser.error("--turns and --rounds must be >= 1")
    if cluster_missing("journal_writes"):
        return 2
    with throwaway_cluster() as (cluster, database):
        url = cluster.url(database)
        migrate(url)
        postmaster = cluster.postmaster_pid()
        assert postmaster is not None
        figures = asyncio.run(measure(url, postmaster, args.turns, args.rounds))
    print(
        f"PostgreSQL journal writes, {args.turns} turns x {WRITES_PER_TURN} writes per round, "
        f"median of {args.rounds} rounds, per write:"
    )
    for (in_flight, mode), runs in figures.items():
        wall, cpu, server = medians(runs)
        print(
            f"  x{in_flight:<3} {mode:<17} {wall:6.3f} ms wall   {cpu:6.3f} ms coordinator CPU   "
            f"{server:6.3f} ms server CPU"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
