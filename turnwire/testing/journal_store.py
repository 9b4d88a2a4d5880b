"""The store under test: how the conformance cases open, use and close a journal.

A case gets a ``JournalStore`` (the ``journal_store`` fixture), built from the
``journal_factory`` fixture that a suite's subclass provides. ``run`` runs the
case's scenario on a fresh event loop (plain ``asyncio.run``: no pytest plugin
is needed) and closes every handle the scenario opened, once each.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

import pytest

from coordinator_svc.ports import Journal, LeasingJournal

T = TypeVar("T")

JournalFactory = Callable[[], Journal | Awaitable[Journal]]
"""Opens one handle on the case's store (sync, or a coroutine function).

Every call in one case must reach the same store, fresh and empty when the
case starts (migrated, if the backend has a schema). The first call is the
case's journal; the cases that race two writers call it again for a second
handle, like a second replica with its own connections. A backend with a
single writer may return the same object every time (``single_handle``).
It is called inside the case's running event loop.
"""


def single_handle(make: Callable[[], Journal]) -> JournalFactory:
    """A factory that makes one journal on its first call and returns it on every call.

    For a journal that must be the store's only writer (a write-through cache),
    or one that keeps its store in memory: the race cases then race on one handle.
    """
    made: list[Journal] = []

    def open_once() -> Journal:
        if not made:
            made.append(make())
        return made[0]

    return open_once


class JournalStore:
    """One fresh store for one case, and the handles the case opened on it."""

    def __init__(self, factory: JournalFactory) -> None:
        self._factory = factory
        self._opened: list[Journal] = []

    async def open(self) -> Journal:
        """Another handle on this case's store (see ``JournalFactory``)."""
        opened = self._factory()
        journal = await opened if inspect.isawaitable(opened) else opened
        if not any(journal is seen for seen in self._opened):
            self._opened.append(journal)
        return journal

    async def open_leasing(self) -> LeasingJournal:
        """Another handle, held to ``ports.LeasingJournal`` (it must take §5 leases)."""
        journal = await self.open()
        if not callable(getattr(journal, "claim", None)):
            pytest.fail(
                f"{type(journal).__name__} has no claim(): it is not a LeasingJournal; "
                "run it through JournalConformance, not LeasingJournalConformance",
                pytrace=False,
            )
        return cast(LeasingJournal, journal)

    def run(self, scenario: Callable[[Journal], Awaitable[T]]) -> T:
        """Run ``scenario(journal)`` on a fresh event loop; close every handle after."""

        async def main() -> T:
            try:
                return await scenario(await self.open())
            finally:
                await self._close_all()

        return asyncio.run(main())

    def run_leasing(self, scenario: Callable[[LeasingJournal], Awaitable[T]]) -> T:
        """``run`` for a scenario that claims leases (§5)."""

        async def main() -> T:
            try:
                return await scenario(await self.open_leasing())
            finally:
                await self._close_all()

        return asyncio.run(main())

    async def _close_all(self) -> None:
        opened, self._opened = self._opened, []
        for journal in opened:
            await journal.close()


class JournalCases:
    """What every group of cases shares: the two fixtures.

    ``journal_factory`` is the one a suite's subclass overrides; until it
    does, every case errors at setup saying so.
    """

    @pytest.fixture
    def journal_factory(self) -> JournalFactory:
        """Override in your subclass: return a ``JournalFactory`` for a fresh store."""
        raise NotImplementedError(
            f"{type(self).__name__} must override the journal_factory fixture: "
            "return a callable that opens a handle on a fresh, empty journal store"
        )

    @pytest.fixture
    def journal_store(self, journal_factory: JournalFactory) -> JournalStore:
        return JournalStore(journal_factory)
