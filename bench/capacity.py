"""Busy runners, measured: N turns submitted at once to one runner with S slots.

    python -m bench capacity [--turns 12] [--slots 4] [--sleep-ms 5000] [--sizes-first] [--json]

A real runner (metered executor, in this process) and the real dispatcher on
an in-memory journal. Prints the final states, the Dispatches the runner
refused (they never count toward max_attempts: PROTOCOL C6a), executor starts,
the wall time and the ideal wall time (ceil(turns / slots) x sleep). With
``--sizes-first`` the turns are submitted only once the coordinator has read the
runner's pool sizes (then it routes only to free slots and nothing is refused).
Loopback only; every process and task it starts is stopped before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import sys
import tempfile
import time
from pathlib import Path

from coordinator_svc.core.model import AttemptOutcome
from coordinator_svc.storage import FakeJournal
from turnwire.testing.dispatcher_rig import Rig


async def measure(turns: int, slots: int, sleep_ms: int, sizes_first: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="turnwire-capacity-") as tmp:
        rig = Rig(Path(tmp), FakeJournal())
        try:
            await rig.start_runner(slots=slots)
            dispatcher = rig.make_dispatcher()
            await dispatcher.start()
            for _ in range(200):  # bounded: 10 s
                if not sizes_first or dispatcher.room.scheduler.known("r1"):
                    break
                await asyncio.sleep(0.05)
            started = time.monotonic()
            ops = [await rig.submit({"sleep_ms": str(sleep_ms)}) for _ in range(turns)]
            bound = 30.0 + 2 * turns * sleep_ms / 1000 / max(slots, 1)
            done = [await rig.terminal(op, within=bound) for op in ops]
            wall = time.monotonic() - started
            refused = 0
            for op in ops:
                attempts = await rig.journal.attempts(op)
                refused += sum(a.outcome is AttemptOutcome.REFUSED for a in attempts)
            return {
                "turns": turns,
                "slots": slots,
                "states": dict(collections.Counter(r.state.value for r in done)),
                "refused_dispatches": refused,
                "executor_starts": sum(rig.starts().values()),
                "wall_seconds": round(wall, 2),
                "ideal_seconds": math.ceil(turns / max(slots, 1)) * sleep_ms / 1000,
            }
        finally:
            await rig.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--sleep-ms", type=int, default=5000)
    parser.add_argument(
        "--sizes-first", action="store_true", help="submit once the runner's sizes are known"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.turns < 1 or args.slots < 1 or args.sleep_ms < 0:
        parser.error("--turns and --slots must be at least 1, --sleep-ms not negative")
    figures = asyncio.run(measure(args.turns, args.slots, args.sleep_ms, args.sizes_first))
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>20}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
