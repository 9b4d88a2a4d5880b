"""One PostgreSQL statement from the event loop: through a worker thread, or on the loop itself.

    .venv/bin/python -m bench postgres_handoff [--writes N] [--rounds R]

The journal runs its PostgreSQL statements on worker threads (psycopg's
blocking connection), so every write costs a hand-off to a thread and a
wake-up of the loop when it is done. On this machine waking an idle thread
is expensive (issue 10). This measures the alternative before anyone builds
it: the same one-statement write (a compare-and-set UPDATE with an INSERT
selected from it, as ``coordinator_svc/storage/single_statement.py`` sends)
sent from the services' event loop (uvloop when installed) either through a
one-thread executor with a blocking connection, or with psycopg's
``AsyncConnection`` on the loop, one at a time and 16 at once (one
connection each way: the 16 queue for it). Alternating rounds, medians.

It prints figures and never judges speed: exit 0 unless something broke.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from bench.ab_rounds import Figures, alternating, cluster_missing, medians, throwaway_cluster
from turnwire import event_loop

ROWS = 500
WRITE = (
    "WITH changed AS (UPDATE rows SET version = version + 1 WHERE id = %(id)s RETURNING id),"
    " added AS (INSERT INTO events SELECT CAST(%(id)s AS text), CAST(%(n)s AS bigint)"
    " FROM changed) SELECT count(*) FROM changed"
)
WAYS = ("worker thread", "on the loop")


async def through_a_thread(dsn: str) -> tuple[Callable[[int], Awaitable[None]], Callable[[], Any]]:
    executor = ThreadPoolExecutor(1, thread_name_prefix="handoff")
    loop = asyncio.get_running_loop()
    connection = await loop.run_in_executor(executor, lambda: psycopg.connect(dsn, autocommit=True))

    def blocking(n: int) -> None:
        with connection.cursor() as cursor:
            cursor.execute(WRITE, {"id": f"row-{n % ROWS}", "n": n})
            assert cursor.fetchone() == (1,)

    async def write(n: int) -> None:
        await loop.run_in_executor(executor, blocking, n)

    async def close() -> None:
        await loop.run_in_executor(executor, connection.close)
        executor.shutdown(wait=True)

    return write, close


async def on_the_loop(dsn: str) -> tuple[Callable[[int], Awaitable[None]], Callable[[], Any]]:
    connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    turn = asyncio.Lock()  # one connection: one statement at a time, as the thread has

    async def write(n: int) -> None:
        async with turn, connection.cursor() as cursor:
            await cursor.execute(WRITE, {"id": f"row-{n % ROWS}", "n": n})
            assert await cursor.fetchone() == (1,)

    return write, connection.close


async def one_round(dsn: str, way: str, in_flight: int, first: int, writes: int) -> list[float]:
    """[wall ms, CPU ms of this process] per write."""
    write, close = await (through_a_thread(dsn) if way == WAYS[0] else on_the_loop(dsn))
    gate = asyncio.Semaphore(in_flight)

    async def gated(n: int) -> None:
        async with gate:
            await write(n)

    try:
        for n in range(first, first + 50):  # warm-up: prepared statements, caches
            await write(n)
        first += 50
        cpu_before, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(gated(n) for n in range(first, first + writes)))
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_before
    finally:
        await close()
    return [wall * 1000 / writes, cpu * 1000 / writes]


async def measure(dsn: str, writes: int, rounds: int) -> Figures:
    setup = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with setup:
        await setup.execute("CREATE TABLE rows (id text PRIMARY KEY, version bigint NOT NULL)")
        await setup.execute("CREATE TABLE events (id text NOT NULL, n bigint PRIMARY KEY)")
        for n in range(ROWS):
            await setup.execute("INSERT INTO rows VALUES (%s, 0)", (f"row-{n}",))
    first = 0

    async def round_of(way: str, in_flight: int) -> list[float]:
        nonlocal first
        start, first = first, first + writes + 50  # event keys unique across rounds
        return await one_round(dsn, way, in_flight, start, writes)

    return await alternating(WAYS, rounds, round_of, "handoff")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--writes", type=int, default=3000, help="writes per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each way once per round")
    args = parser.parse_args(argv)
    if args.writes < 1 or args.rounds < 1:
        parser.error("--writes and --rounds must be >= 1")
    if cluster_missing("postgres_handoff"):
        return 2
    with throwaway_cluster() as (cluster, database):
        figures = event_loop.run(measure(cluster.dsn(database), args.writes, args.rounds))
    print(f"one-statement PostgreSQL write, median of {args.rounds} rounds, per write:")
    for (in_flight, way), runs in figures.items():
        wall, cpu = medians(runs)
        print(f"  x{in_flight:<3} {way:<14} {wall:6.3f} ms wall   {cpu:6.3f} ms CPU (this process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
