"""Named crash points (fault injection depth 3), listed in one place.

A process armed with ``TURNWIRE_CRASH_AT=<name>[@N][,<name>[@N]...]`` kills
itself with SIGKILL the N-th time (default: first) execution reaches
``crash_point(<name>)``. Unarmed, a crash point costs one dict lookup.
Tests use this to stop a real process between two durable steps.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

ENV_VAR = "TURNWIRE_CRASH_AT"

CRASH_POINTS: dict[str, str] = {
    # coordinator
    "coordinator.after_attempt_commit": "attempt row committed (C4), Dispatch not yet sent",
    "coordinator.after_dispatch_send": "Dispatch sent, its reply not yet recorded",
    "coordinator.after_terminal_commit": "terminal state committed (C10), Release not yet sent",
    # runner
    "runner.after_dedupe_commit": (
        "dedupe row committed (R3; with its launch intent when the turn launches at once, "
        "R4), Dispatch reply not yet sent"
    ),
    "runner.after_launch_intent": (
        "launch intent committed (R3: its own write, or the admission's), executor not yet started"
    ),
    "runner.after_executor_finished": "executor finished, settlement not yet committed (R7)",
    "runner.after_execution_end": "a failed execution's end committed (R15), no retry intent yet",
    "runner.before_retry_intent": "the retry wait is over (R15), its launch intent not yet written",
}

_lock = threading.Lock()
_hits: dict[str, int] = {}


def _armed() -> dict[str, int]:
    spec = os.environ.get(ENV_VAR, "")
    armed: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, nth = part.partition("@")
        if name not in CRASH_POINTS:
            raise ValueError(
                f"{ENV_VAR}: unknown crash point {name!r}; known: {sorted(CRASH_POINTS)}"
            )
        armed[name] = int(nth) if nth else 1
    return armed


_ARMED = _armed()


def crash_point(name: str) -> None:
    """SIGKILL this process here if armed for ``name`` (and this is the N-th hit)."""
    if name not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {name!r}")
    target = _ARMED.get(name)
    if target is None:
        return
    with _lock:
        _hits[name] = _hits.get(name, 0) + 1
        hit = _hits[name]
    if hit == target:
        print(f"crash point {name} reached (hit {hit}): SIGKILL", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
