"""Which asyncio event loop the services run on: uvloop when it is installed.

uvloop's loop (libuv) costs less CPU per callback, socket event and timer
than the standard selector loop; with the coordinator and runners mostly
shuttling small messages, that is a measured part of a turn's CPU (issue 10,
bench/e2e.py). ``TURNWIRE_EVENT_LOOP=asyncio`` chooses the standard loop
(to compare, or to rule the loop out while chasing a bug); any other value
is refused at start, never ignored.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

ENV = "TURNWIRE_EVENT_LOOP"
CHOICES = ("uvloop", "asyncio")


def chosen() -> str:
    """The loop this process will run: the environment's choice, else uvloop if importable."""
    wanted = os.environ.get(ENV, "").strip().lower()
    if wanted and wanted not in CHOICES:
        raise ValueError(f"{ENV} must be one of {', '.join(CHOICES)}, got {wanted!r}")
    if wanted == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if wanted == "uvloop":
            raise ValueError(f"{ENV}=uvloop but uvloop is not installed") from None
        return "asyncio"
    return "uvloop"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    if chosen() == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the chosen loop (ValueError, with ``main`` closed
    unstarted, for a bad ``TURNWIRE_EVENT_LOOP``)."""
    try:
        factory = loop_factory()
    except ValueError:
        main.close()
        raise
    if factory is None:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
