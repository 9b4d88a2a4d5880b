"""Releases (C10) carried on the next Dispatch to the same runner (issue 10).

After a turn's terminal write the coordinator owes its runner a Release. On a
busy coordinator another Dispatch to that runner follows within milliseconds,
so the Release rides on it (``DispatchRequest.releases``) instead of costing
a call of its own; one still owed after ``window`` seconds goes as its own
Release call, as every Release used to. A Release only lets the runner drop a
result the journal already holds (R9), so sending it a little later, or twice,
changes nothing else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from coordinator_svc.core import commands as cmd
from coordinator_svc.dispatcher.metrics import DispatcherMetrics

# How long an owed Release waits for a Dispatch to ride on (seconds).
CARRY_WINDOW = 0.05

Owed = tuple[str, cmd.Release]  # (operation_id, the Release command)


class ReleaseCarrier:
    """The Releases owed to each runner, until a Dispatch takes them or the window ends."""

    def __init__(
        self,
        send_alone: Callable[[str, cmd.Release], None],
        metrics: DispatcherMetrics,
        window: float = CARRY_WINDOW,
    ) -> None:
        self._send_alone = send_alone
        self._metrics = metrics
        self._window = window
        self._owed: dict[str, list[Owed]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def owe(self, operation_id: str, command: cmd.Release) -> None:
        runner = command.runner
        self._owed.setdefault(runner, []).append((operation_id, command))
        if runner not in self._timers:
            loop = asyncio.get_running_loop()
            self._timers[runner] = loop.call_later(self._window, self._flush, runner)

    def take(self, runner: str, incarnation_id: str) -> list[Owed]:
        """The Releases a Dispatch to ``runner``/``incarnation_id`` carries (a
        Release names its incarnation: others stay owed)."""
        owed = self._owed.get(runner, [])
        taken = [entry for entry in owed if entry[1].incarnation_id == incarnation_id]
        if taken:
            left = [entry for entry in owed if entry[1].incarnation_id != incarnation_id]
            if left:
                self._owed[runner] = left
            else:
                self._forget(runner)
            self._metrics.releases_carried += len(taken)
        return taken

    def give_back(self, entries: Sequence[Owed]) -> None:
        """A Dispatch that may not have reached the runner: owe its Releases again."""
        for operation_id, command in entries:
            self._metrics.releases_carried -= 1
            self.owe(operation_id, command)

    def _flush(self, runner: str) -> None:
        self._timers.pop(runner, None)
        for operation_id, command in self._owed.pop(runner, []):
            self._send_alone(operation_id, command)

    def _forget(self, runner: str) -> None:
        self._owed.pop(runner, None)
        timer = self._timers.pop(runner, None)
        if timer is not None:
            timer.cancel()

    def drop(self, runner: str) -> None:
        """``runner`` left the set (§11 M6): what is owed to it is never sent (its
        rows stay, K6)."""
        self._forget(runner)

    def close(self) -> None:
        """Stop: what is still owed is not sent (the runner keeps those results, R9)."""
        for runner in list(self._timers):
            self._forget(runner)
        self._owed.clear()
