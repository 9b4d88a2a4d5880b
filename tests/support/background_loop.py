"""A test stack's services served from an event loop on a thread of their own.

The sync client (and the CLI) then call them over real channels from the test
thread. A subclass defines ``_start`` and ``_stop`` (coroutines); entering runs
``_start`` (and everything is stopped again if it fails), leaving runs ``_stop``
and ends the loop, each bounded by ``STARTUP_SECONDS``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, Self

STARTUP_SECONDS = 30.0


class BackgroundLoop:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def _run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coroutine`` on the loop and wait (bounded) for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(STARTUP_SECONDS)

    async def _start(self) -> None:
        raise NotImplementedError

    async def _stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        try:
            self._run(self._start())
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self._thread.is_alive():
                self._run(self._stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(STARTUP_SECONDS)
            self._loop.close()
