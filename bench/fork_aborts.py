"""How often a forked child dies before exec, with gRPC's fork handlers on and off.

A child the runner forks to exec its command, with gRPC's fork handlers on
(gRPC's default) and off (the runner's setting).

    .venv/bin/python -m bench fork_aborts [--children N] [--json]

gRPC's fork handlers start its event-engine threads again in every forked
child, between fork and exec; one of them sometimes polls a descriptor that
``close_fds`` has just closed and aborts the child ("epoll_wait error: Bad
file descriptor", SIGABRT: grpc/grpc#43055). runner_svc/fork_safety.py turns
the handlers off in the runner process. This script measures both sides, each
in a fresh interpreter (gRPC reads the switch as it loads): an aio server on
127.0.0.1:0, a sync channel calling it from a thread every 50 ms (as an OTLP
exporter does), and N children started as the subprocess executor starts them
(its death-signal preexec, ``close_fds``, a session of their own), one after
another. It prints, per side, the children that did not exit 0 and the
threads the first child had between fork and exec.

It prints figures and never judges: exit 0 unless something broke. A rate of
one in hundreds needs hundreds of children to show (default 600, about 20 s a
side); the thread count shows the hazard in every child.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from bench import REPO_ROOT

SWITCH = "GRPC_ENABLE_FORK_SUPPORT"
CALL_EVERY = 0.05
SIDE_TIMEOUT = 600.0


def _caller(port: int, stop: threading.Event) -> None:
    """A sync channel used from a thread now and then, as an exporter does."""
    import grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary("/bench.Nothing/Call")
        while not stop.is_set():
            # No such method: the call is what matters, not its answer.
            with contextlib.suppress(grpc.RpcError):
                call(b"", timeout=0.2)
            stop.wait(CALL_EVERY)


async def _side(children: int) -> dict[str, Any]:
    import grpc

    from runner_svc.executors import groups

    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    stop = threading.Event()
    caller = threading.Thread(target=_caller, args=(port, stop), daemon=True)
    caller.start()
    exits: collections.Counter[int] = collections.Counter()
    first_threads = 0
    started = time.monotonic()
    try:
        for number in range(children):
            arm = groups.death_signal_preexec()
            read_end, write_end = os.pipe()

            def count_then_arm(write_end: int = write_end, arm: Any = arm) -> None:
                os.write(write_end, str(len(os.listdir("/proc/self/task"))).encode())
                arm()

            # As the executor does: a blocking Popen on the loop's thread (the fork is
            # what is measured, and the death signal follows the forking thread).
            child = subprocess.Popen(  # noqa: ASYNC220
                ["/bin/true"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                start_new_session=True,
                preexec_fn=count_then_arm,
            )
            os.close(write_end)
            threads = os.read(read_end, 16)
            os.close(read_end)
            if number == 0:
                first_threads = int(threads or b"0")
            exits[child.wait(timeout=10)] += 1
            await asyncio.sleep(0.005)  # the loop and the caller get their turns
    finally:
        stop.set()
        caller.join(timeout=5)
        await server.stop(None)
    return {
        "children": children,
        "not_exit_0": children - exits[0],
        "exits": {str(code): count for code, count in sorted(exits.items())},
        "threads_in_child_before_exec": first_threads,
        "seconds": round(time.monotonic() - started, 1),
    }


def _run_side(handlers: str, children: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != SWITCH}
    if handlers == "off":
        env[SWITCH] = "false"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.fork_aborts",
            "--side",
            handlers,
            "--children",
            str(children),
        ],
        env=env,
        cwd=REPO_ROOT,  # where ``-m bench.fork_aborts`` and runner_svc import from: this tree
        capture_output=True,
        text=True,
        timeout=SIDE_TIMEOUT,
        check=True,
    )
    figures: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    figures["handlers"] = handlers
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--children", type=int, default=600, help="children per side")
    parser.add_argument("--json", action="store_true", help="one JSON object, nothing else")
    parser.add_argument("--side", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.children < 1:
        parser.error("--children must be at least 1")
    if args.side:
        print(json.dumps(asyncio.run(_side(args.children))))
        return 0
    # SIGTERM unwinds: subprocess.run then kills the side it is waiting for (by PID).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sides = []
    for handlers in ("on", "off"):
        if not args.json:
            print(f"gRPC fork handlers {handlers}: {args.children} children ...", flush=True)
        sides.append(_run_side(handlers, args.children))
    if args.json:
        print(json.dumps({"sides": sides}))
        return 0
    for side in sides:
        print(
            f"handlers {side['handlers']:>3}: {side['not_exit_0']} of {side['children']} "
            f"children did not exit 0 (exits {side['exits']}); a child had "
            f"{side['threads_in_child_before_exec']} thread(s) between fork and exec "
            f"({side['seconds']} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
