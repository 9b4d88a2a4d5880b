"""Drains reach the dispatcher (PROTOCOL.md §10 V8): at start, and on replicas by poll.

A drain is a journal row (``runner_drains``), so it survives a restart and
every replica sharing a PostgreSQL journal honours it. The replica that took
the DrainRunner call hands it to its own dispatcher at once; the others read
the drains again every ``DRAIN_POLL_SECONDS``, so a drained runner gets no new
turn from any replica after at most that long. A read that fails keeps the
drains in force (fail closed: never undrain on an error) and logs a WARNING.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Protocol

from coordinator_svc.ports import AdminJournal, JournalError

log = logging.getLogger("coordinator_svc.admin")

DRAIN_POLL_SECONDS = 2.0


class DrainTarget(Protocol):
    def set_drained(self, runners: Collection[str]) -> None: ...


async def load_drains(journal: AdminJournal, target: DrainTarget) -> None:
    """Hand the journal's drains to ``target`` now (raises JournalError)."""
    drained = [d.runner for d in await journal.drains()]
    if drained:
        log.info("drained runner(s), no new turns for them: %s", ", ".join(drained))
    target.set_drained(drained)


async def follow_drains(
    journal: AdminJournal, target: DrainTarget, poll_seconds: float = DRAIN_POLL_SECONDS
) -> None:
    """Read the drains every ``poll_seconds`` until cancelled (a replica's task)."""
    while True:
        await asyncio.sleep(poll_seconds)
        try:
            target.set_drained([d.runner for d in await journal.drains()])
        except JournalError as exc:
            log.warning("could not read runner drains (the ones in force stay): %s", exc)
