"""The real coordinator in its own process, counting for bench/e2e.py.

    python -m bench counting_coordinator --counters-file F serve [coordinator serve flags]

Bench-only. Every flag after ``serve`` is parsed by the coordinator's own
parser (``coordinator_svc.__main__``) into the same ``CoordinatorConfig``, and
the coordinator is started through ``start_coordinator`` as ``python -m
coordinator_svc serve`` starts it, with one difference: its journal is the
real adapter wrapped in ``CountingJournal`` (bench/counting_journal.py: one
counter increment per call, nothing else). The dispatcher counts its runner
calls itself (``DispatcherMetrics``), as it always does.

On SIGUSR1 it writes a snapshot of the counters to F (atomically, replacing
the file): ``seq`` (one more than the last snapshot's), the journal's commits,
the journal calls by method, every integer and counter of the dispatcher's
metrics, and ``due_pending``: whether the journal has an operation due now
(one ``due(now, 1)`` read on the unwrapped journal, so it is not counted).
Taking a snapshot costs this process a little CPU, so the bench takes them
only between measured loops. The first snapshot (``seq`` 0) is written before
the address is announced. It runs on the event loop ``serve`` runs on
(``turnwire.event_loop``). SIGTERM or SIGINT stops it as ``serve`` stops.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.counting_journal import CountingJournal
from coordinator_svc.__main__ import build_parser, config_from_args
from coordinator_svc.app import RunningCoordinator, start_coordinator
from coordinator_svc.storage import migrate, open_journal
from turnwire import event_loop
from turnwire.observability import tracing
from turnwire.observability.logs import configure_logging
from turnwire.serving import announce

EXIT_FAILED = 1
EXIT_USAGE = 2


def dispatcher_counters(running: RunningCoordinator) -> dict[str, Any]:
    """Every int and Counter field of the dispatcher's metrics, whatever they are named."""
    counters: dict[str, Any] = {}
    for name, value in vars(running.dispatcher.metrics).items():
        if isinstance(value, collections.Counter):
            counters[name] = dict(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            counters[name] = value
    return counters


class Snapshots:
    """Writes the counters to ``path`` on request, one at a time."""

    def __init__(self, path: Path, running: RunningCoordinator, counting: CountingJournal) -> None:
        self.path = path
        self.running = running
        self.counting = counting
        self.seq = 0
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    def request(self) -> None:
        """Signal handler: schedule one snapshot (requests arriving together share one)."""
        task = asyncio.get_running_loop().create_task(self.write())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def write(self) -> None:
        async with self._lock:
            pending = await self.counting.inner.due(datetime.now(UTC), 1)  # not counted
            snapshot = {
                "seq": self.seq,
                "pid": os.getpid(),
                "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
                "journal_commits": self.counting.commits,
                # The SQL journal's COMMITs: writes that shared one count once.
                "journal_transactions": getattr(self.counting.inner, "write_transactions", None),
                "journal_calls": dict(self.counting.calls),
                "dispatcher": dispatcher_counters(self.running),
                "due_pending": bool(pending),
            }
            partial = self.path.with_suffix(self.path.suffix + ".tmp")
            partial.write_text(json.dumps(snapshot, sort_keys=True))
            partial.replace(self.path)
            self.seq += 1


async def serve(args: argparse.Namespace, counters_file: Path) -> int:
    config = config_from_args(args)
    counting = CountingJournal(open_journal(config.journal_url))
    try:
        running = await start_coordinator(config, journal=counting)
    except BaseException:
        await counting.close()  # ours until start succeeded
        raise
    snapshots = Snapshots(counters_file, running, counting)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    try:
        await snapshots.write()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        loop.add_signal_handler(signal.SIGUSR1, snapshots.request)
        announce(running.address, config.address_file)
        await stop.wait()
    finally:
        await running.stop(args.shutdown_grace)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    outer = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        usage="%(prog)s --counters-file F serve [coordinator serve flags]",
    )
    outer.add_argument("--counters-file", required=True, type=Path)
    if "serve" not in argv:
        outer.error("expected: --counters-file F serve [coordinator serve flags]")
    split = argv.index("serve")
    own = outer.parse_args(argv[:split])
    args = build_parser().parse_args(argv[split:])
    configure_logging(args.log_level, args.log_format)  # as serve does
    try:
        config_from_args(args)  # a config that does not hold together: exit 2, like serve
    except ValueError as error:
        print(f"counting_coordinator: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.migrate:
        migrate(args.journal_url)
    if args.otel_endpoint:  # as serve does (docs/TRACING.md)
        tracing.start(tracing.COORDINATOR_SERVICE, args.otel_endpoint)
    try:
        # The event loop serve runs on (uvloop when installed; TURNWIRE_EVENT_LOOP).
        return event_loop.run(serve(args, own.counters_file))
    except Exception as error:  # journal, port, tokens: say what, exit 1 like serve
        print(f"counting_coordinator: error: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        tracing.shutdown()


if __name__ == "__main__":
    sys.exit(main())
