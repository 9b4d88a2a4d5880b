"""One turn's walk through the code: which files of ours it enters, and how often it comes back.

    .venv/bin/python -m bench turn_walk [--warmup N] [--top N] [--timeout S] [--json]

Stands up a real runner (``runner_svc.app.start_runner``, the ``echo``
executor) and a real coordinator (``coordinator_svc.app.start_coordinator``,
a SQLite journal) in this process on 127.0.0.1:0, and talks to them with a raw
TurnService stub. ``--warmup`` turns run first, so imports and first calls
are not counted; then exactly one more turn is traced, from SubmitTurn until
WatchOperation hands the client its terminal event.

Every thread is profiled (the event loop, the journal's and the runner
store's worker threads). Whatever else runs in that window is counted too
(timers, watch streams, lease keeping): that is part of what a turn costs.
Only frames whose file lies inside coordinator_svc/, runner_svc/ or
turnwire/ (as imported: see the printed paths) are counted.

Per package it prints the distinct files and functions entered, the function
entries (a coroutine or generator resumed after an await or a yield is a
resumption, counted apart), and the top files by returns (defined in the
output). It prints figures and never judges them: exit 0 unless something
broke (a service did not start, the turn did not end, --timeout passed).
"""

from __future__ import annotations

import argparse
import asyncio
import dis
import hashlib
import json
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import grpc

import coordinator_svc
import runner_svc
import turnwire
from turnwire.common.v1 import turn_pb2
from turnwire.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from turnwire.transport_security import RunnerAccess, RunnerCredentials, new_secret

PACKAGES = {
    m.__name__: Path(m.__file__ or "").resolve().parent
    for m in (coordinator_svc, runner_svc, turnwire)
}
RETURN_DEFINITION = (
    "a return to file F = an entry into a function of F whose caller (the Python frame "
    "below it) is in another file, or is none; a resumption is not an entry"
)
TOKEN = "tw_turn-walk-token"
COLUMNS = ("files", "functions", "entries", "returns", "resumptions")
ROW = "{:<16}{:>7}{:>11}{:>9}{:>9}{:>13}"
Entry = tuple[str, str, str, bool]  # (package, file in it, function, caller in another file)


class Walk:
    """A profile function for every thread; it counts only while ``on`` is set."""

    def __init__(self) -> None:
        self.on = False
        self.entries: dict[int, Counter[Entry]] = {}  # per thread: no two threads share one
        self.resumptions: dict[int, Counter[str]] = {}
        self._where: dict[str, tuple[str, str] | None] = {}
        self._first: dict[CodeType, int] = {}

    def where(self, filename: str) -> tuple[str, str] | None:
        if filename not in self._where:
            path = Path(filename).resolve() if filename[:1] == "/" else None
            self._where[filename] = next(
                (
                    (name, str(path.relative_to(root)))
                    for name, root in PACKAGES.items()
                    if path is not None and path.is_relative_to(root)
                ),
                None,
            )
        return self._where[filename]

    def fresh(self, frame: FrameType) -> bool:
        # A resumed coroutine or generator also raises "call"; a fresh frame has
        # not passed its first RESUME instruction yet (CPython 3.11+).
        code = frame.f_code
        if code not in self._first:
            self._first[code] = next(
                (i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0
            )
        return frame.f_lasti <= self._first[code]

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event != "call":
            return
        place = self.where(frame.f_code.co_filename)
        if place is None:
            return
        ident = threading.get_ident()
        if not self.fresh(frame):
            self.resumptions.setdefault(ident, Counter())[place[0]] += 1
            return
        caller = frame.f_back.f_code.co_filename if frame.f_back is not None else None
        function = f"{frame.f_code.co_qualname}:{frame.f_code.co_firstlineno}"
        self.entries.setdefault(ident, Counter())[
            (*place, function, caller != frame.f_code.co_filename)
        ] += 1

    def figures(self, top: int) -> dict[str, Any]:
        entries: Counter[Entry] = sum(self.entries.values(), Counter())
        resumed: Counter[str] = sum(self.resumptions.values(), Counter())
        returns: Counter[str] = Counter()
        packages: dict[str, Any] = {}
        for name in PACKAGES:
            mine = {key: count for key, count in entries.items() if key[0] == name}
            for key, count in mine.items():
                returns[f"{name}/{key[1]}"] += count if key[3] else 0
            files, functions = {key[1] for key in mine}, {key[1:3] for key in mine}
            back = sum(count for key, count in mine.items() if key[3])
            figures = (len(files), len(functions), sum(mine.values()), back, resumed[name])
            packages[name] = dict(zip(COLUMNS, figures, strict=True))
        return {
            "packages": packages,
            "top_returns": [[path, count] for path, count in returns.most_common(top)],
            "return_definition": RETURN_DEFINITION,
            "package_paths": {name: str(root) for name, root in PACKAGES.items()},
        }


async def one_turn(stub: Any, key: str) -> str:
    """SubmitTurn, then WatchOperation until the stream ends after the terminal event."""
    metadata = (("authorization", f"Bearer {TOKEN}"),)
    turn = coordinator_pb2.Turn(
        model=turn_pb2.ModelRef(provider="builtin", name="echo"),
        input_items=[turn_pb2.InputItem(item_id="i1", role="user", content=b"hello")],
        kind=turn_pb2.TURN_KIND_WRITABLE,
    )
    request = coordinator_pb2.SubmitTurnRequest(idempotency_key=key, turn=turn)
    submitted = await stub.SubmitTurn(request, metadata=metadata)
    watch = coordinator_pb2.WatchOperationRequest(operation_id=submitted.operation.operation_id)
    state = submitted.operation.state
    async for message in stub.WatchOperation(watch, metadata=metadata):
        if message.HasField("operation"):
            state = message.operation.state
    return str(coordinator_pb2.OperationState.Name(state))


async def walk_one_turn(walk: Walk, warmup: int, directory: Path) -> list[str]:
    from coordinator_svc.app import start_coordinator
    from coordinator_svc.config import CoordinatorConfig, RunnerEndpoint
    from coordinator_svc.storage.schema import migrate
    from runner_svc.app import RunnerConfig, start_runner

    secret = new_secret()
    runner = await start_runner(
        RunnerConfig(store_path=directory / "runner.db", access=RunnerAccess(secret=secret))
    )
    coordinator = None
    try:
        tokens = directory / "tokens"
        tokens.write_text(f"walker {hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
        tokens.chmod(0o600)
        journal_url = f"sqlite:///{directory / 'journal.db'}"
        migrate(journal_url)
        coordinator = await start_coordinator(
            CoordinatorConfig(
                listen="127.0.0.1:0",
                journal_url=journal_url,
                runners=(RunnerEndpoint(name="r1", address=runner.address),),
                tokens_file=str(tokens),
                runner_credentials=RunnerCredentials(secret=secret),
            )
        )
        async with grpc.aio.insecure_channel(coordinator.address) as channel:
            stub = coordinator_pb2_grpc.TurnServiceStub(channel)
            states = [await one_turn(stub, f"warmup-{n}") for n in range(warmup)]
            walk.on = True
            try:
                states.append(await one_turn(stub, "walked"))
            finally:
                walk.on = False
        return states
    finally:
        if coordinator is not None:
            await coordinator.stop(grace=1.0)
        await runner.stop(drain=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog=f"Prints, per package: {', '.join(COLUMNS)}; then the top files by returns. "
        f"Definition: {RETURN_DEFINITION}.",
    )
    parser.add_argument(
        "--warmup", type=int, metavar="N", default=1, help="turns before the traced one"
    )
    parser.add_argument("--top", type=int, metavar="N", default=10, help="files listed by returns")
    parser.add_argument(
        "--timeout", type=float, metavar="S", default=60.0, help="give up after S seconds"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object, nothing else")
    args = parser.parse_args(argv)
    if args.warmup < 0 or args.top < 1 or args.timeout <= 0:
        parser.error("--warmup must be at least 0, --top at least 1, --timeout above 0")
    walk = Walk()
    threading.setprofile(walk.profile)  # threads started from now on: the pools start lazily
    sys.setprofile(walk.profile)
    try:
        with tempfile.TemporaryDirectory(prefix="turn-walk-") as scratch:
            coroutine = walk_one_turn(walk, args.warmup, Path(scratch))
            states = asyncio.run(asyncio.wait_for(coroutine, args.timeout))
    except TimeoutError:
        print(f"turn_walk: no terminal state within --timeout {args.timeout:g}s", file=sys.stderr)
        return 1
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    figures = walk.figures(args.top) | {"states": states}
    if args.json:
        print(json.dumps(figures))
        return 0
    for name, path in figures["package_paths"].items():
        print(f"{name}: {path}")
    print(f"turns: {args.warmup} warm-up, then 1 traced; final states {', '.join(states)}")
    print(ROW.format("package", *COLUMNS))
    for name, row in figures["packages"].items():
        print(ROW.format(name, *(row[column] for column in COLUMNS)))
    print(f"returns: {RETURN_DEFINITION}")
    print(f"top {args.top} files by returns:")
    for path, count in figures["top_returns"]:
        print(f"  {count:>6}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
