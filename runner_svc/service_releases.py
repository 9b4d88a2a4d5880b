"""Releases carried on a Dispatch (C10, issue 10), applied in the background.

Each is applied exactly as a Release call would be; one refused or failed is
logged and changes nothing. The tasks still running are ended before the
store closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from runner_svc.core.model import RunnerRefusal
from turnwire.observability.logs import turn_context

log = logging.getLogger("runner_svc.service")

Release = Callable[[str, str, int], Awaitable[bool]]


class CarriedReleases:
    """The background applying of carried releases through the service's ``release``."""

    def __init__(self, release: Release) -> None:
        self._release = release
        self._tasks: set[asyncio.Task[None]] = set()

    def apply_later(self, releases: tuple[tuple[str, str, int], ...]) -> None:
        """(operation_id, expected_incarnation_id, token) each, in the background."""
        task = asyncio.get_running_loop().create_task(self._apply_all(releases))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _apply_all(self, releases: tuple[tuple[str, str, int], ...]) -> None:
        for operation_id, incarnation_id, token in releases:
            # Each its own turn in the log, not the Dispatch's that carried it.
            with turn_context(operation_id, incarnation=incarnation_id):
                try:
                    await self._release(operation_id, incarnation_id, token)
                except RunnerRefusal as refusal:
                    log.info("carried release of %r not applied: %s", operation_id, refusal)
                except Exception:  # a bug: logged with its trace, the others still applied
                    log.exception("carried release of %r failed", operation_id)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
