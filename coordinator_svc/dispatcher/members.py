"""The runner set as this coordinator uses it, and the per-runner machinery that follows it
(PROTOCOL.md §11 M5).

One place holds which runners are members now (their endpoints, generation
included), which are drained (V8), and each member's watch stream and its
task. :meth:`Members.apply` is the one way the set changes: at start with the
journal's set, at run time with each set a replica reads or an operator's
call makes. For a member that joined it builds the runner client and status
batcher (``calls.RunnerCalls.add``), the watch stream (started once the
dispatcher runs) and a fresh slot ledger entry; for one that left (or whose
generation changed: a name added again is a new member, M7) it stops the
watch and waits for its task to end, lets calls already on the wire finish
within a grace and closes the channel (``RunnerCalls.remove``), drops owed
Releases and forgets the runner's slots. Nothing is sent to a runner that is
not a member (``performing``: the core decides, M6).

No journal I/O here; the engine wakes the operations bound to a runner that left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Coroutine, Sequence
from typing import Any

from coordinator_svc.config import RunnerEndpoint
from coordinator_svc.core.membership import MembershipChange, membership_change
from coordinator_svc.core.scheduler import Scheduler
from coordinator_svc.dispatcher.calls import RunnerCalls
from coordinator_svc.dispatcher.watching import RunnerWatch
from coordinator_svc.ports import RunnerGateway

log = logging.getLogger("coordinator_svc.dispatcher")


class Members:
    """``watch_for``: a new member's watch stream; ``spawn``: run a task the
    dispatcher owns (ended at its stop)."""

    def __init__(
        self,
        runners: Sequence[RunnerEndpoint],
        calls: RunnerCalls,
        scheduler: Scheduler,
        watch_for: Callable[[RunnerGateway], RunnerWatch],
        spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]],
    ) -> None:
        self.endpoints: tuple[RunnerEndpoint, ...] = tuple(runners)
        # Runners an operator drained (§10 V8): no new turns.
        self.drained: frozenset[str] = frozenset()
        self._calls = calls
        self._scheduler = scheduler
        self._watch_for = watch_for
        self._spawn = spawn
        self.watches: dict[str, RunnerWatch] = {
            name: watch_for(client) for name, client in calls.clients.items()
        }
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        # Members this process cannot call (logged once each; tried again each read).
        self._unreachable: set[RunnerEndpoint] = set()
        self._running = False
        # One change at a time: a replica's poll and an operator's call may race.
        self._lock = asyncio.Lock()

    @property
    def names(self) -> frozenset[str]:
        return frozenset(e.name for e in self.endpoints)

    def start(self) -> None:
        """The dispatcher runs: every member's watch stream starts (C9)."""
        self._running = True
        for name, watch in self.watches.items():
            self._tasks[name] = self._spawn(watch.run())

    def stop(self) -> None:
        self._running = False
        for watch in self.watches.values():
            watch.stop()

    def watch_on(self, runner: str) -> RunnerWatch | None:
        return self.watches.get(runner)

    async def apply(
        self, runners: Sequence[RunnerEndpoint], drained: Collection[str]
    ) -> tuple[MembershipChange, bool]:
        """Make ``runners`` the members and ``drained`` the drains (M5). Returns what
        changed in the set, and whether the drains did."""
        async with self._lock:
            change = membership_change(self.endpoints, runners)
            for runner in change.removed:
                await self._close(runner)
            for runner in change.added:
                self._open(runner)
            # A member this process could not build a client for is none here:
            # the scheduler must not grant it turns it cannot send.
            reachable = [e for e in runners if self._calls.configured(e.name)]
            self.endpoints = tuple(sorted(reachable, key=lambda e: e.name))
            self._scheduler.set_runners(self.endpoints)
            wanted = frozenset(drained)
            drains_changed = wanted != self.drained
            self.drained = wanted
            return change, drains_changed

    def _open(self, runner: RunnerEndpoint) -> None:
        try:
            client = self._calls.add(runner)
        except ValueError as error:
            # The set is the journal's; this replica cannot call it (no credentials):
            # say so once, and treat it as not a member here (nothing is sent to it).
            if runner not in self._unreachable:
                self._unreachable.add(runner)
                log.error(
                    "runner %s is in the set but cannot be called here: %s", runner.name, error
                )
            return
        watch = self._watch_for(client)
        self.watches[runner.name] = watch
        if self._running:
            self._tasks[runner.name] = self._spawn(watch.run())
        log.info(
            "runner %s (generation %d, %s, pool %s) joined the runner set",
            runner.name,
            runner.generation,
            runner.address,
            runner.pool,
        )

    async def _close(self, runner: RunnerEndpoint) -> None:
        self._calls.remove(runner.name)  # first: nothing more is sent to it
        watch = self.watches.pop(runner.name, None)
        if watch is not None:
            watch.stop()
        task = self._tasks.pop(runner.name, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._scheduler.forget(runner.name)
        log.info(
            "runner %s (generation %d, %s) left the runner set",
            runner.name,
            runner.generation,
            runner.address,
        )
