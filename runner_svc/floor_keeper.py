"""The runner's half of the §6.1 witness over time: raising the admission floor.

The rules are pure (runner_svc.core.witness) and the writes are the store's;
this only decides *when*: every interval while serving (to the clock minus the
admission window), straight to the seal once admission is closed (R8: nothing
more will be admitted, so a runner killed mid-drain still vouches for all it
did), and a last seal at close. A floor that fails to move only makes later
proofs scarcer (more honest UNKNOWNs), never wrong: errors are logged, not fatal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from runner_svc.core.witness import SEALED_FLOOR
from runner_svc.storage.async_store import AsyncRunnerStore
from runner_svc.storage.sqlite_store import StoreError

log = logging.getLogger("runner_svc.floor")


class FloorKeeper:
    def __init__(
        self,
        store: AsyncRunnerStore,
        *,
        window_seconds: float,
        interval_seconds: float,
        accepting: Callable[[], bool],
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._window_us = int(window_seconds * 1_000_000)
        self._interval = interval_seconds
        self._accepting = accepting
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self.raise_once()
            await asyncio.sleep(self._interval)

    async def raise_once(self) -> None:
        target = (
            int(self._clock() * 1_000_000) - self._window_us if self._accepting() else SEALED_FLOOR
        )
        try:
            await self._store.advance_floor(target)
        except StoreError as exc:
            log.error("incarnation %s: floor not raised: %s", self._store.incarnation_id, exc)

    async def stop_and_seal(self) -> None:
        """Stop the timer, then seal (called at close, after the drain)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        try:
            sealed = await self._store.seal()
        except StoreError as exc:
            log.error("incarnation %s: store not sealed: %s", self._store.incarnation_id, exc)
            return
        if not sealed:
            log.warning(
                "incarnation %s: store not sealed (a turn was admitted but never launched); "
                "the next incarnation will treat turns sent to this one as unknown",
                self._store.incarnation_id,
            )
