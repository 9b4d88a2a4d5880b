"""What the A/B benches on a throwaway PostgreSQL cluster share (journal_writes.py,
postgres_handoff.py): the cluster, and ways of doing one thing measured in
alternating rounds (this machine drifts; alternating spreads the drift over both)."""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence

from turnwire.testing.postgres import PostgresCluster, missing_binary

IN_FLIGHT = (1, 16)
# (in flight, way) -> one list of figures per round.
Figures = dict[tuple[int, str], list[list[float]]]


def cluster_missing(script: str) -> bool:
    """True (having said why) when no throwaway cluster can start here."""
    missing = missing_binary()
    if missing is not None:
        print(f"{script}: needs a PostgreSQL cluster: {missing} not found", file=sys.stderr)
    return missing is not None


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[tuple[PostgresCluster, str]]:
    """A started cluster and a new database in it; stopped (by PID if it lingers) after."""
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster, cluster.create_database()
    finally:
        cluster.stop()


async def alternating(
    ways: Sequence[str],
    rounds: int,
    one_round: Callable[[str, int], Awaitable[list[float]]],
    tag: str,
) -> Figures:
    """``one_round(way, in_flight)`` for every way, ``rounds`` times at each in-flight
    count, the order of the ways reversed every other round."""
    figures: Figures = {}
    for in_flight in IN_FLIGHT:
        for number in range(rounds):
            for way in ways if number % 2 == 0 else tuple(reversed(ways)):
                figures.setdefault((in_flight, way), []).append(await one_round(way, in_flight))
                print(
                    f"[{tag}] x{in_flight} round {number + 1}/{rounds}: {way}",
                    file=sys.stderr,
                    flush=True,
                )
    return figures


def medians(runs: list[list[float]]) -> list[float]:
    """Each figure's median over the rounds."""
    return [statistics.median(column) for column in zip(*runs, strict=True)]
